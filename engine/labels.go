package engine

import (
	"context"
	"runtime/pprof"
)

// ProfileLabelKey is the pprof label the store puts on its goroutines when
// Options.ProfileLabels is set, so a CPU profile splits by what the time was
// spent on. Its values are the Stage constants; a sample without it is the
// caller's own code (or the runtime's).
const ProfileLabelKey = "mqstore.stage"

// The values of ProfileLabelKey.
const (
	StageAppend    = "append"    // a producer inside Put: checks, encoding, the append lock, the copy
	StageWait      = "wait"      // a producer waiting for durability (sync flush, SYNC_MASTER)
	StageCommit    = "commit"    // the commit service (buffered backends)
	StageFlush     = "flush"     // the flush service, the group commit's owner (its commit included)
	StageDispatch  = "dispatch"  // ConsumeQueue units and index entries, and their flushes
	StagePrewrite  = "prewrite"  // the allocation service: new segments, pre-written or warmed
	StageReplicate = "replicate" // the replication services of a master or a slave
)

// stageLabels are the label sets of the stages, made once at Open: setting
// one on a goroutine is a pointer store, so a Put with labels on allocates
// nothing.
type stageLabels struct {
	on                     bool
	append, wait, dispatch context.Context
}

func newStageLabels(on bool) stageLabels {
	if !on {
		return stageLabels{}
	}
	return stageLabels{on: true, append: stageContext(StageAppend), wait: stageContext(StageWait), dispatch: stageContext(StageDispatch)}
}

func stageContext(stage string) context.Context {
	return pprof.WithLabels(context.Background(), pprof.Labels(ProfileLabelKey, stage))
}

// labelService labels the calling goroutine, a store service, when on.
func labelService(on bool, stage string) {
	if on {
		pprof.SetGoroutineLabels(stageContext(stage))
	}
}
