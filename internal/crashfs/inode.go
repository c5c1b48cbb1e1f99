//go:build linux

package crashfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// pageSize is the unit the overlay keeps unsynced data in.
const pageSize = 4096

// sectorSize is the unit a page is torn in when only part of it was written
// back before the cut.
const sectorSize = 512

// zeroPage stands for a page that is all zeros (a prewritten segment, a
// zeroed range): many of them cost no memory. It is never written to.
var zeroPage = new([pageSize]byte)

// inode is one backing file's state: the backing file holds the durable
// bytes; pages holds what was written since the last sync, which only a
// sync copies to the backing file.
//
// The running view of byte b (b < size) is pages[b/pageSize] when that page
// is held, else the backing byte when b < min(cut, durable), else zero.
// Bytes of a held page at or past size are always zero.
type inode struct {
	mu      sync.Mutex
	ino     uint64
	path    string   // relative to the backing root, as last seen (for reports)
	rw      *os.File // the daemon's own descriptor on the backing file
	size    int64    // what the application sees
	durable int64    // the backing file's size
	cut     int64    // backing bytes at or past cut read as zero (an unsynced shrink)
	pages   map[int64]*[pageSize]byte
}

func newInode(ino uint64, path string, rw *os.File) (*inode, error) {
	st, err := rw.Stat()
	if err != nil {
		return nil, fmt.Errorf("crashfs: stat %s: %w", path, err)
	}
	return &inode{ino: ino, path: path, rw: rw, size: st.Size(), durable: st.Size(), cut: st.Size(),
		pages: map[int64]*[pageSize]byte{}}, nil
}

// readBase fills p with the view of [off, off+len(p)) without the held
// pages: backing bytes below min(cut, durable), zeros past it.
func (n *inode) readBase(p []byte, off int64) error {
	limit := min(n.cut, n.durable)
	clear(p)
	if off >= limit {
		return nil
	}
	m := min(int64(len(p)), limit-off)
	if _, err := n.rw.ReadAt(p[:m], off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("crashfs: read %s at %d: %w", n.path, off, err)
	}
	return nil
}

// page returns a writable copy-on-write page idx, loading it from the
// view when it is not held.
func (n *inode) page(idx int64) (*[pageSize]byte, error) {
	if p := n.pages[idx]; p != nil && p != zeroPage {
		return p, nil
	} else if p == zeroPage {
		np := new([pageSize]byte)
		n.pages[idx] = np
		return np, nil
	}
	np := new([pageSize]byte)
	if err := n.readBase(np[:], idx*pageSize); err != nil {
		return nil, err
	}
	// Bytes past size read as zero even if the backing has more.
	if end := n.size - idx*pageSize; end < pageSize {
		clear(np[max(0, end):])
	}
	n.pages[idx] = np
	return np, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// write stores data at off in the overlay.
func (n *inode) write(data []byte, off int64) error {
	if off < 0 {
		return unix.EINVAL
	}
	for done := 0; done < len(data); {
		pos := off + int64(done)
		idx, in := pos/pageSize, int(pos%pageSize)
		k := min(pageSize-in, len(data)-done)
		chunk := data[done : done+k]
		if k == pageSize && allZero(chunk) {
			n.pages[idx] = zeroPage
		} else {
			p, err := n.page(idx)
			if err != nil {
				return err
			}
			copy(p[in:], chunk)
		}
		done += k
	}
	n.size = max(n.size, off+int64(len(data)))
	return nil
}

// read fills dest from the view at off and returns how many bytes there are.
func (n *inode) read(dest []byte, off int64) (int, error) {
	if off >= n.size || off < 0 {
		return 0, nil
	}
	m := int(min(int64(len(dest)), n.size-off))
	dest = dest[:m]
	if err := n.readBase(dest, off); err != nil {
		return 0, err
	}
	for idx := off / pageSize; idx*pageSize < off+int64(m); idx++ {
		p := n.pages[idx]
		if p == nil {
			continue
		}
		start := max(idx*pageSize, off)
		end := min((idx+1)*pageSize, off+int64(m))
		copy(dest[start-off:end-off], p[start-idx*pageSize:end-idx*pageSize])
	}
	return m, nil
}

// truncate sets the size the application sees.
func (n *inode) truncate(size int64) error {
	if size < 0 {
		return unix.EINVAL
	}
	if size < n.size {
		for idx, p := range n.pages {
			switch {
			case idx*pageSize >= size:
				delete(n.pages, idx)
			case (idx+1)*pageSize > size && p != zeroPage:
				clear(p[size-idx*pageSize:])
			}
		}
		n.cut = min(n.cut, size)
	}
	n.size = size
	return nil
}

// zero makes [off, off+length) read as zeros (FALLOC_FL_ZERO_RANGE,
// FALLOC_FL_PUNCH_HOLE), within size.
func (n *inode) zero(off, length int64) error {
	end := min(off+length, n.size)
	for pos := off; pos < end; {
		idx, in := pos/pageSize, pos%pageSize
		k := min(pageSize-in, end-pos)
		if k == pageSize {
			n.pages[idx] = zeroPage
		} else {
			p, err := n.page(idx)
			if err != nil {
				return err
			}
			clear(p[in : in+k])
		}
		pos += k
	}
	return nil
}

// dirty reports whether the overlay holds anything a sync would write.
func (n *inode) dirty() bool {
	return len(n.pages) > 0 || n.size != n.durable || n.cut < n.durable
}

// sync makes the view durable: the backing file gets the view's size and
// every held page. It is what FSYNC does; the host does not crash, so the
// backing file itself is not fsynced.
func (n *inode) sync() error {
	if !n.dirty() {
		return nil
	}
	if n.cut < n.durable {
		if err := n.rw.Truncate(n.cut); err != nil {
			return fmt.Errorf("crashfs: sync %s: %w", n.path, err)
		}
	}
	if err := n.rw.Truncate(n.size); err != nil {
		return fmt.Errorf("crashfs: sync %s: %w", n.path, err)
	}
	for _, idx := range n.sortedPages() {
		p := n.pages[idx]
		m := min(pageSize, n.size-idx*pageSize)
		if m <= 0 {
			continue
		}
		if _, err := n.rw.WriteAt(p[:m], idx*pageSize); err != nil {
			return fmt.Errorf("crashfs: sync %s at %d: %w", n.path, idx*pageSize, err)
		}
	}
	clear(n.pages)
	n.durable, n.cut = n.size, n.size
	return nil
}

func (n *inode) sortedPages() []int64 {
	idxs := make([]int64, 0, len(n.pages))
	for idx := range n.pages {
		idxs = append(idxs, idx)
	}
	slices.Sort(idxs)
	return idxs
}

// FileReport says what a power loss did to one file's unsynced state.
type FileReport struct {
	Path        string `json:"path"`
	Size        int64  `json:"size"`        // what the application saw
	DurableSize int64  `json:"durableSize"` // the backing size before the cut
	KeptSize    int64  `json:"keptSize"`    // the backing size after it
	// Dropped, Kept and Torn list unsynced page offsets: lost, written
	// back whole, and written back in part (Sectors: a bit per 512-byte
	// sector that reached the disk).
	Dropped []ByteRange `json:"dropped,omitempty"`
	Kept    []ByteRange `json:"kept,omitempty"`
	Torn    []TornPage  `json:"torn,omitempty"`
	Error   string      `json:"error,omitempty"`
}

// TornPage is an unsynced page of which only some sectors were written back.
type TornPage struct {
	Offset  int64 `json:"offset"`
	Sectors uint8 `json:"sectors"`
}

// ByteRange is [Off, Off+Len).
type ByteRange struct {
	Off int64 `json:"off"`
	Len int64 `json:"len"`
}

// powerLoss applies a power loss to the backing file: with rng nil every
// unsynced byte is lost (the backing file is left as it is); otherwise each
// unsynced page is, at random, lost, written back whole or torn at sector
// granularity, and the file keeps its durable size or takes its running
// size — writeback that happened before the cut.
func (n *inode) powerLoss(rng *rand.Rand) FileReport {
	r := FileReport{Path: n.path, Size: n.size, DurableSize: n.durable, KeptSize: n.durable}
	if !n.dirty() {
		return r
	}
	idxs := n.sortedPages()
	if rng == nil {
		r.Dropped = merge(idxs)
		return r
	}
	keepSize := rng.IntN(2) == 0
	size := n.durable
	if keepSize {
		size = n.size
	} else if n.cut < n.durable {
		size = n.durable // a shrink that did not reach the disk
	}
	var err error
	if keepSize && n.cut < n.durable {
		err = n.rw.Truncate(n.cut) // the shrink reached the disk: what it cut reads as zeros
	}
	if size != n.durable && err == nil {
		err = n.rw.Truncate(size)
	}
	r.KeptSize = size
	var dropped, kept []int64
	for _, idx := range idxs {
		p := n.pages[idx]
		m := min(int64(pageSize), size-idx*pageSize)
		switch c := rng.IntN(4); {
		case m <= 0 || c < 2:
			dropped = append(dropped, idx)
		case c == 2:
			if _, werr := n.rw.WriteAt(p[:m], idx*pageSize); werr != nil && err == nil {
				err = werr
			}
			kept = append(kept, idx)
		default:
			mask := uint8(rng.IntN(255) + 1)
			for s := int64(0); s < pageSize/sectorSize; s++ {
				lo, hi := s*sectorSize, min((s+1)*sectorSize, m)
				if mask&(1<<s) == 0 || lo >= hi {
					continue
				}
				if _, werr := n.rw.WriteAt(p[lo:hi], idx*pageSize+lo); werr != nil && err == nil {
					err = werr
				}
			}
			r.Torn = append(r.Torn, TornPage{Offset: idx * pageSize, Sectors: mask})
		}
	}
	r.Dropped, r.Kept = merge(dropped), merge(kept)
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

func merge(idxs []int64) []ByteRange {
	var out []ByteRange
	for _, idx := range idxs {
		if k := len(out) - 1; k >= 0 && out[k].Off+out[k].Len == idx*pageSize {
			out[k].Len += pageSize
			continue
		}
		out = append(out, ByteRange{Off: idx * pageSize, Len: pageSize})
	}
	return out
}
