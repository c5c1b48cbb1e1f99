package bench

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/mappedfile"
)

// storeDurabilitySemantics says what an mqstore acknowledgement means for
// a cell's engine options: the backend's own statement (its registration's
// Durability, which names the system calls its Commit and Flush make with
// these options), with this run's flush and commit intervals named, and,
// for a replicated cell, what the replication role adds. Nothing here
// describes a backend's mechanism: that text lives with the backend's code.
func storeDurabilitySemantics(o engine.Options, replication string) (*runfile.Durability, error) {
	reg, err := mappedfile.Registered().Lookup(o.Backend)
	if err != nil {
		return nil, err
	}
	sync := o.FlushMode == engine.FlushSync
	d, err := reg.Durability(mappedfile.Config{SegmentSizeBytes: o.SegmentSizeBytes, SyncFlush: sync}, o.BackendOptions)
	if err != nil {
		return nil, fmt.Errorf("backend %s: durability: %w", o.Backend, err)
	}
	out := &runfile.Durability{Ack: d.Ack, ProcessCrash: d.ProcessCrash, PowerLoss: d.PowerLoss, Mechanism: d.Mechanism}
	if !sync {
		var here []string
		if strings.Contains(d.PowerLoss+d.ProcessCrash, "flush interval") {
			here = append(here, "flush interval "+cmp.Or(o.FlushInterval, engine.DefaultFlushInterval).String())
		}
		if strings.Contains(d.PowerLoss+d.ProcessCrash, "commit interval") {
			here = append(here, "commit interval "+cmp.Or(o.CommitInterval, engine.DefaultCommitInterval).String())
		}
		if strings.Contains(d.PowerLoss, "flush least pages") {
			if least := cmp.Or(o.FlushLeastPages, engine.DefaultFlushLeastPages); least > 0 {
				here = append(here, fmt.Sprintf("flush least pages %d (%s)", least, runfile.SizeLabel(least*4096)))
			} else {
				here = append(here, "flush least pages: any byte")
			}
		}
		if strings.Contains(d.PowerLoss, "thorough flush interval") {
			here = append(here, "thorough flush interval "+cmp.Or(o.FlushThoroughInterval, engine.DefaultFlushThoroughInterval).String())
		}
		if len(here) > 0 {
			out.PowerLoss += " (here: " + strings.Join(here, ", ") + ")"
		}
	}
	replicationDurability(out, replication, o)
	return out, nil
}

// replicationDurability adds what a replication role changes to a
// backend's statement: with SYNC_MASTER the acknowledgement also waits for
// a slave (its own process and directory, the same backend and flush mode),
// so losing the master — its process, its power or its disk — loses nothing
// acknowledged; with ASYNC_MASTER the slave follows behind by the
// replication lag. MachineLoss is what losing the master's machine for good
// loses.
func replicationDurability(d *runfile.Durability, replication string, o engine.Options) {
	slave := fmt.Sprintf("the slave (same backend, %s flush)", o.FlushMode)
	switch replication {
	case ReplicationSync:
		d.Ack += "; and only once " + slave + " acknowledged holding it (SYNC_MASTER; FLUSH_SLAVE_TIMEOUT after " +
			cmp.Or(o.SlaveTimeout, engine.DefaultSlaveTimeout).String() + ")"
		d.ProcessCrash = "nothing acknowledged (the slave holds it)"
		d.PowerLoss = "of the master alone: nothing acknowledged (the slave holds it); of both machines: what the slave had not made durable — " +
			map[bool]string{true: "nothing acknowledged with a sync-flush slave", false: "up to its flush interval with an async-flush slave"}[o.FlushMode == engine.FlushSync]
		d.MachineLoss = "nothing acknowledged"
		d.Mechanism += "; replication: the master streams committed CommitLog bytes over TCP (RocketMQ's HA protocol), the slave appends them through its own backend and reports its offset, and a Put waits for that offset to reach its record"
	case ReplicationAsync:
		d.Ack += "; replicated in the background (ASYNC_MASTER)"
		d.MachineLoss = "what the slave had not yet acknowledged: the replication lag (see lag bytes and ms)"
		d.Mechanism += "; replication: the master streams committed CommitLog bytes to the slave in the background"
	default:
		d.MachineLoss = "everything: no other copy"
	}
}
