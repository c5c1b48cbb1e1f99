package main

import (
	"flag"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/cli"
)

// retentionFlags set when the store deletes old CommitLog segments (and the
// ConsumeQueue and index files that follow them): engine.Options'
// FileReservedTime, DeleteWhen, DiskMaxUsedRatio and CleanInterval —
// RocketMQ's fileReservedTime, deleteWhen and diskMaxUsedSpaceRatio.
// With --recycle-segments, the segments retention deletes are the ones the
// store reuses.
type retentionFlags struct {
	reserved *time.Duration
	when     *string
	ratio    *int
	every    *time.Duration
}

func addRetentionFlags(fs *flag.FlagSet) *retentionFlags {
	return &retentionFlags{
		reserved: fs.Duration("file-reserved-time", engine.DefaultFileReservedTime,
			"retention: a CommitLog segment is expired once its newest message is older than this (RocketMQ's fileReservedTime)"),
		when: fs.String("delete-when", engine.DefaultDeleteWhen,
			`retention: the hours of the day at which expired segments are deleted, ";"-separated ("04;16"), or "*" for every hour (RocketMQ's deleteWhen)`),
		ratio: fs.Int("disk-max-used-ratio", engine.DefaultDiskMaxUsedRatio,
			"retention: while the store's disk is fuller than this percentage, the oldest segments are deleted whatever their age (RocketMQ's diskMaxUsedSpaceRatio)"),
		every: fs.Duration("clean-interval", engine.DefaultCleanInterval, "retention: how often the store looks for segments to delete"),
	}
}

// apply checks the flags and sets them in o.
func (r *retentionFlags) apply(fs *flag.FlagSet, o *engine.Options) error {
	if err := r.check(fs); err != nil {
		return err
	}
	r.set(o)
	return nil
}

// check reports the first bad retention flag as a usage error.
func (r *retentionFlags) check(fs *flag.FlagSet) error {
	switch {
	case *r.reserved <= 0:
		return cli.BadFlag(fs, "--file-reserved-time must be positive, got %v", *r.reserved)
	case *r.every <= 0:
		return cli.BadFlag(fs, "--clean-interval must be positive, got %v", *r.every)
	case *r.ratio < 1 || *r.ratio > 100:
		return cli.BadFlag(fs, "--disk-max-used-ratio must be a percentage from 1 to 100, got %d", *r.ratio)
	}
	if err := engine.CheckDeleteWhen(*r.when); err != nil {
		return cli.BadFlag(fs, "--delete-when: %v", err)
	}
	return nil
}

// set sets the checked flags in o.
func (r *retentionFlags) set(o *engine.Options) {
	o.FileReservedTime, o.DeleteWhen, o.DiskMaxUsedRatio, o.CleanInterval = *r.reserved, *r.when, *r.ratio, *r.every
}
