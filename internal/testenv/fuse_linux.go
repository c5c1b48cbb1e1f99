package testenv

import "golang.org/x/sys/unix"

// fuseMagic is statfs's f_type of a FUSE file system.
const fuseMagic = 0x65735546

// OnFUSE reports whether path is on a FUSE file system (crashfs, for one).
// There page flags, FIEMAP and device probes describe the daemon's mount,
// not a disk: the write-through FUSE page cache is never dirty, FIEMAP is
// not forwarded, and the device is virtual.
func OnFUSE(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == fuseMagic
}
