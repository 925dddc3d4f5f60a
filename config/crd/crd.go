// Package crd holds the generated CustomResourceDefinitions (bases/, written
// by `make manifests`), so that a program that checks a manifest without an
// API server, such as `agentrun local`, reads the very schema and CEL rules
// the API server enforces.
package crd

import _ "embed"

// AgentRuns is the AgentRun CustomResourceDefinition, as YAML.
//
//go:embed bases/agents.agentrun.dev_agentruns.yaml
var AgentRuns []byte

// AgentEvaluations is the AgentEvaluation CustomResourceDefinition, as
// YAML.
//
//go:embed bases/agents.agentrun.dev_agentevaluations.yaml
var AgentEvaluations []byte

// MCPServers is the MCPServer CustomResourceDefinition, as YAML.
//
//go:embed bases/agents.agentrun.dev_mcpservers.yaml
var MCPServers []byte
