package mappedfile_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

func TestRegistryRejectsBadRegistrations(t *testing.T) {
	newMem, memDurability := mappedfile.MemRegistration.New, mappedfile.MemRegistration.Durability
	for _, tc := range []struct {
		name string
		regs []mappedfile.Registration
	}{
		{"empty name", []mappedfile.Registration{{Name: "", New: newMem, Durability: memDurability}}},
		{"name with a comma", []mappedfile.Registration{{Name: "a,b", New: newMem, Durability: memDurability}}},
		{"no constructor", []mappedfile.Registration{{Name: "x", Durability: memDurability}}},
		{"no durability statement", []mappedfile.Registration{{Name: "x", New: newMem}}},
		{"duplicate", []mappedfile.Registration{mappedfile.MemRegistration, mappedfile.MemRegistration}},
		{"two defaults", []mappedfile.Registration{{Name: "a", New: newMem, Durability: memDurability, Default: true}, {Name: "b", New: newMem, Durability: memDurability, Default: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := mappedfile.NewRegistry(tc.regs...); !errors.Is(err, mappedfile.ErrInvalidArgument) {
				t.Fatalf("NewRegistry: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestRegistryLookupNewAndDecode(t *testing.T) {
	r := mappedfile.MustRegistry(mappedfile.MemRegistration)
	if got := r.Names(); !reflect.DeepEqual(got, []string{"mem"}) {
		t.Fatalf("Names: %v", got)
	}
	if _, err := r.Lookup("floppy"); !errors.Is(err, mappedfile.ErrUnknownBackend) || !strings.Contains(err.Error(), "mem") {
		t.Fatalf("Lookup of an unknown name: %v, want ErrUnknownBackend naming the known ones", err)
	}
	for _, opts := range []any{nil, mappedfile.MemOptions{Buffered: true}, &mappedfile.MemOptions{Buffered: true}} {
		b, err := r.New("mem", mappedfile.Config{}, opts)
		if err != nil || b.Name() != "mem" {
			t.Fatalf("New(mem, %#v): %v, %v", opts, b, err)
		}
	}
	if _, err := r.New("mem", mappedfile.Config{}, struct{ PoolSize int }{3}); !errors.Is(err, mappedfile.ErrInvalidArgument) || !strings.Contains(err.Error(), "MemOptions") {
		t.Fatalf("New with another options type: %v, want ErrInvalidArgument naming MemOptions", err)
	}
	data, err := json.Marshal(mappedfile.MemOptions{Buffered: true})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := r.DecodeOptions("mem", data)
	if err != nil || !reflect.DeepEqual(opts, &mappedfile.MemOptions{Buffered: true}) {
		t.Fatalf("DecodeOptions(%s): %#v, %v", data, opts, err)
	}
	if _, err := r.DecodeOptions("mem", []byte(`{"Bufferd": true}`)); !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("DecodeOptions with a misspelt field: %v, want ErrInvalidArgument", err)
	}
}

// TestRegistryOrderAndDefault: registrations are listed by rank, then name,
// and Default finds the one marked so — or says that none is linked.
func TestRegistryOrderAndDefault(t *testing.T) {
	newMem, memDurability := mappedfile.MemRegistration.New, mappedfile.MemRegistration.Durability
	r := mappedfile.MustRegistry(
		mappedfile.Registration{Name: "z", Rank: 1, New: newMem, Durability: memDurability},
		mappedfile.Registration{Name: "b", Rank: 5, New: newMem, Durability: memDurability, Default: true},
		mappedfile.Registration{Name: "a", Rank: 1, New: newMem, Durability: memDurability},
	)
	if got := r.Names(); !reflect.DeepEqual(got, []string{"a", "z", "b"}) {
		t.Fatalf("Names: %v, want by rank then name", got)
	}
	if def, err := r.Default(); err != nil || def.Name != "b" {
		t.Fatalf("Default: %q, %v", def.Name, err)
	}
	if _, err := mappedfile.MustRegistry(mappedfile.MemRegistration).Default(); !errors.Is(err, mappedfile.ErrUnknownBackend) {
		t.Fatalf("Default with none marked: %v, want ErrUnknownBackend", err)
	}
	if _, err := mappedfile.Registered().Lookup("mem"); err != nil {
		t.Fatalf("the process registry lacks mem: %v", err)
	}
}
