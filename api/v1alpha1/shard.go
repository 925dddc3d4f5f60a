package v1alpha1

// LabelShard assigns an AgentRun to a shard of the operator: a manager
// started with --shard=NAME drives exactly the runs whose label has the
// value NAME, and a manager without --shard drives exactly the runs
// without the label. The key follows Flux's sharding.fluxcd.io/key, under
// this API's group. The operator copies it onto the Jobs it makes for the
// run, so each shard's cache holds only its own runs and Jobs.
const LabelShard = "sharding.agents.agentrun.dev/key"
