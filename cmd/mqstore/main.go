// Command mqstore is the admin tool of an mqstore store: produce messages,
// dump, consume, query and verify a store, and run masters and slaves that
// replicate (serve, slave, repair-slave).
//
// Usage: mqstore <command> [flags]; mqstore <command> -h for each command's flags.
// Bad flags print usage and exit 2; errors exit 1 with the reason.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mqstore/mqstore/internal/cli"
)

// tool is the mqstore command; cmd/mqbench shares the frame (internal/cli).
var tool = cli.Tool{Name: "mqstore", Commands: map[string]cli.Command{
	"produce": {Summary: "append generated messages to a store", Run: runProduce},
	"dump":    {Summary: "print CommitLog records as JSON lines", Run: runDump},
	"consume": {Summary: "read a queue through its ConsumeQueue as JSON lines", Run: runConsume},
	"query":   {Summary: "find messages by key or UNIQ_KEY through the index", Run: runQuery},
	"verify":  {Summary: "check every record, ConsumeQueue unit and index key", Run: runVerify},
	"serve":   {Summary: "run a master or a slave store until SIGINT/SIGTERM", Run: runServe},
	"slave":   {Summary: "run a slave that replicates a master (serve --role slave)", Run: runSlave},
	"repair-slave": {Summary: "cut a diverged slave's CommitLog where it parts from its master's",
		Run: runRepairSlave},
	"namesrv":   {Summary: "run a RocketMQ name server that brokers register with", Run: runNamesrv},
	"gen-certs": {Summary: "write a CA and master and slave certificates for mutual TLS on the HA port", Run: runGenCerts},

	"controller": {Summary: "run a member of the failover controller group (raft) until SIGINT/SIGTERM", Run: runController},
	"cluster":    {Summary: "cluster status: each broker set's master, epochs, in-sync set and lag", Run: runCluster},
}}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return tool.Run(ctx, args, stdout, stderr)
}
