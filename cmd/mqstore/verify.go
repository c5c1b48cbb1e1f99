package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/mqstore/mqstore/internal/cli"
)

var errInconsistent = errors.New("store is inconsistent")

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory (required)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore verify --dir DIR\n\nOpens the store (recovering it if needed), checks every record's CRC, every\nConsumeQueue unit against its record and every index key; exit 0 when consistent.")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "dir"); err != nil {
		return err
	}
	store, err := openExisting(ctx, *dir)
	if err != nil {
		return err
	}
	defer store.Close()
	rep, err := store.Verify(ctx)
	if err != nil {
		return err
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(stdout, "problem:", p)
	}
	if rep.TruncatedMore {
		fmt.Fprintln(stdout, "problem: (more problems not listed)")
	}
	fmt.Fprintf(stdout, "%d records (%d bytes), %d blanks, CommitLog [%d, %d); %d consume queues with %d units; %d index keys; %d problems\n",
		rep.Records, rep.Bytes, rep.Blanks, rep.MinOffset, rep.MaxOffset, rep.Queues, rep.Units, rep.IndexedKeys, len(rep.Problems))
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%d problems: %w", len(rep.Problems), errInconsistent)
	}
	return nil
}
