package operator

import (
	"context"
	"testing"
)

// Issue 44, item 7: `go test -run NONE ./internal/operator` failed,
// because TestMain stops the operator before it has read its keys and the
// stop came back as "reading the state keys Secret ...: context
// canceled". A stop asked for while the operator starts is a stop.
func TestRun_aStopWhileStartingIsNotAFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, adminCfg, Options{OperatorImage: "example.com/agentrun:test", MetricsAddr: "0", ProbeAddr: "0"}); err != nil {
		t.Fatalf("Run with a stopped context = %v, want nil", err)
	}
	// A failure that is not the stop is still one.
	if err := Run(ctx, adminCfg, Options{}); err == nil {
		t.Fatal("Run without an operator image succeeded")
	}
}
