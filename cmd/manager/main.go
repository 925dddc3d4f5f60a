// Command manager is the AgentRun operator.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/agentrun/agentrun/internal/operator"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func main() {
	var o operator.Options
	var qps float64
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address the health probes bind to.")
	flag.BoolVar(&o.LeaderElect, "leader-elect", false, "Elect a leader, so that only one replica drives runs.")
	flag.BoolVar(&o.LocalTools, "local-tools", false, "Run job tools as local processes instead of Jobs (development only).")
	flag.StringVar(&o.OperatorImage, "operator-image", os.Getenv("AGENTRUN_OPERATOR_IMAGE"), "Image whose agentrun-entrypoint binary tool Jobs copy in.")
	flag.IntVar(&o.Workers, "max-concurrent-reconciles", 4, "Reconcile workers (model and tool calls never run on one).")
	flag.Float64Var(&qps, "kube-api-qps", 50, "Queries per second to the API server.")
	flag.IntVar(&o.Burst, "kube-api-burst", 100, "Burst of queries to the API server.")
	zo := zap.Options{}
	zo.BindFlags(flag.CommandLine)
	flag.Parse()
	o.QPS = float32(qps)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))

	cfg, err := ctrl.GetConfig()
	if err == nil {
		err = operator.Run(ctrl.SetupSignalHandler(), cfg, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}
