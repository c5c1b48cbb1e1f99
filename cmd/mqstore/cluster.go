package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mqstore/mqstore/controller"
	"github.com/mqstore/mqstore/internal/cli"
)

// runCluster runs the cluster subcommands (status).
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "usage: mqstore cluster status --controller ADDR[,ADDR...] [--json] [--timeout DURATION]")
	}
	if len(args) == 0 || args[0] != "status" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			usage()
			return flag.ErrHelp
		}
		usage()
		return cli.ErrUsage
	}
	fs := flag.NewFlagSet("cluster status", flag.ContinueOnError)
	addrs := fs.String("controller", "", "controller RPC addresses (host:port, comma-separated; any member of the group)")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "give up when no controller leader answers within this")
	fs.Usage = func() {
		usage()
		fmt.Fprintln(fs.Output(), "\nPrints each broker set's master, master epoch, in-sync set and its epoch, and each replica's\n"+
			"last heartbeat (age, epoch, max offset, lag behind the master) as the controller leader sees them.")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args[1:], stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "controller"); err != nil {
		return err
	}
	if *timeout <= 0 {
		return cli.BadFlag(fs, "--timeout must be positive")
	}
	var list []string
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	client, err := controller.NewClient(list, controller.ClientOptions{})
	if err != nil {
		return cli.BadFlag(fs, "--controller: %v", err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	st, err := client.Status(ctx)
	if err != nil {
		return fmt.Errorf("cluster status: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printClusterStatus(stdout, st)
	return nil
}

func printClusterStatus(w io.Writer, st *controller.ClusterStatus) {
	fmt.Fprintf(w, "controller leader: %s at %s\n", st.LeaderID, st.LeaderAddr)
	if len(st.Sets) == 0 {
		fmt.Fprintln(w, "no broker sets registered")
	}
	for _, s := range st.Sets {
		b := s.Set
		master := "none"
		if b.MasterID != 0 {
			master = fmt.Sprint(b.MasterID)
		}
		fmt.Fprintf(w, "\nbroker set %s: master %s, master epoch %d, in-sync set %v (epoch %d), min in-sync replicas %d, unclean election %v\n",
			b.Name, master, b.MasterEpoch, b.SyncStateSet, b.SyncStateSetEpoch, b.Config.MinInSyncReplicas, b.Config.UncleanElection)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tROLE\tIN-SYNC\tALIVE\tHEARTBEAT\tEPOCH\tMAX-OFFSET\tCONFIRM\tLAG\tADDR\tHA-ADDR")
		for _, r := range s.Replicas {
			role := "slave"
			switch {
			case r.Master:
				role = "master"
			case b.MasterID == 0:
				role = "-" // no master elected yet
			}
			hb, epoch, maxOff, confirm, lag := "never", "-", "-", "-", "-"
			if r.HeartbeatAgeMillis >= 0 {
				hb = (time.Duration(r.HeartbeatAgeMillis) * time.Millisecond).String() + " ago"
				epoch, maxOff, confirm = fmt.Sprint(r.LastEpoch), fmt.Sprint(r.MaxOffset), fmt.Sprint(r.ConfirmOffset)
			}
			if r.Lag >= 0 {
				lag = fmt.Sprint(r.Lag)
			}
			fmt.Fprintf(tw, "%d\t%s\t%v\t%v\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, role, r.InSync, r.Alive, hb, epoch, maxOff, confirm, lag, r.Addr, r.HAAddr)
		}
		tw.Flush()
	}
}
