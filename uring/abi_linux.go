package uring

import "unsafe"

// The kernel ABI of io_uring, written from include/uapi/linux/io_uring.h.
// Only what this package uses is named here.

// Setup flags (io_uring_params.flags).
const (
	setupCQSize    = 1 << 3 // IORING_SETUP_CQSIZE: cq_entries is valid
	setupClamp     = 1 << 4 // IORING_SETUP_CLAMP: clamp the sizes instead of failing
	setupSubmitAll = 1 << 7 // IORING_SETUP_SUBMIT_ALL: keep submitting after a failed SQE
)

// Features reported by io_uring_setup (io_uring_params.features).
const (
	FeatSingleMmap = 1 << 0 // IORING_FEAT_SINGLE_MMAP: SQ and CQ rings share one mapping
	FeatNoDrop     = 1 << 1 // IORING_FEAT_NODROP: completions are never dropped
	FeatSubmitStab = 1 << 2 // IORING_FEAT_SUBMIT_STABLE: SQE data is copied at submit
	FeatRWCurPos   = 1 << 3 // IORING_FEAT_RW_CUR_POS: offset -1 means the file position
	FeatFastPoll   = 1 << 5 // IORING_FEAT_FAST_POLL
	FeatExtArg     = 1 << 8 // IORING_FEAT_EXT_ARG
)

// io_uring_enter flags.
const enterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

// SQ ring flags (the word at sq_off.flags).
const sqCQOverflow = 1 << 1 // IORING_SQ_CQ_OVERFLOW

// mmap offsets of the rings and the SQE array.
const (
	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000
)

// Opcodes (IORING_OP_*).
const (
	OpNop           uint8 = 0
	OpWritev        uint8 = 2
	OpFsync         uint8 = 3
	OpReadFixed     uint8 = 4
	OpWriteFixed    uint8 = 5
	OpSyncFileRange uint8 = 8
	OpFallocate     uint8 = 17
	OpRead          uint8 = 22
	OpWrite         uint8 = 23
	OpSend          uint8 = 26
	OpSplice        uint8 = 30
	// OpWritevFixed (Linux 6.15) is WRITEV whose iovecs all lie in the
	// registered buffer BufIndex.
	OpWritevFixed uint8 = 61
)

// SQE flags (IOSQE_*).
const (
	FlagFixedFile  uint8 = 1 << 0 // fd is an index into the registered files
	FlagIODrain    uint8 = 1 << 1
	FlagIOLink     uint8 = 1 << 2 // the next SQE starts only after this one succeeds
	FlagIOHardLink uint8 = 1 << 3
	FlagAsync      uint8 = 1 << 4
)

// FsyncDataSync is the fsync_flags bit for fdatasync semantics.
const FsyncDataSync uint32 = 1

// RWFDSync is the rw_flags bit RWF_DSYNC (a per-write O_DSYNC).
const RWFDSync uint32 = 0x2

// io_uring_register opcodes.
const (
	registerBuffers       = 0
	unregisterBuffers     = 1
	registerFiles         = 2
	unregisterFiles       = 3
	registerFilesUpdate   = 6
	registerProbe         = 8
	registerBuffers2      = 15
	registerBuffersUpdate = 16
)

// rsrcRegisterSparse asks REGISTER_BUFFERS2 for an empty table of nr slots.
const rsrcRegisterSparse = 1 << 0

// probeOpSupported marks a supported opcode in io_uring_probe_op.flags.
const probeOpSupported = 1 << 0

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// params is struct io_uring_params (120 bytes).
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

// sqe is struct io_uring_sqe (64 bytes), with the unions flattened to the
// members this package uses.
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64 // off / addr2
	addr        uint64 // addr / splice_off_in
	len         uint32
	opFlags     uint32 // rw_flags, fsync_flags, …
	userData    uint64
	bufIndex    uint16
	personality uint16
	fileIndex   uint32 // splice_fd_in / file_index
	addr3       uint64
	pad         uint64
}

// cqe is struct io_uring_cqe (16 bytes, no CQE32).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// iovec is struct iovec.
type iovec struct {
	base uint64
	len  uint64
}

// rsrcRegister is struct io_uring_rsrc_register.
type rsrcRegister struct {
	nr    uint32
	flags uint32
	resv2 uint64
	data  uint64
	tags  uint64
}

// rsrcUpdate2 is struct io_uring_rsrc_update2.
type rsrcUpdate2 struct {
	offset uint32
	resv   uint32
	data   uint64
	tags   uint64
	nr     uint32
	resv2  uint32
}

// filesUpdate is struct io_uring_files_update.
type filesUpdate struct {
	offset uint32
	resv   uint32
	fds    uint64
}

// probeHeader is struct io_uring_probe without its flexible array; probeOp
// is struct io_uring_probe_op.
type probeHeader struct {
	lastOp uint8
	opsLen uint8
	resv   uint16
	resv2  [3]uint32
}

type probeOp struct {
	op    uint8
	resv  uint8
	flags uint16
	resv2 uint32
}

// Compile-time size checks: a wrong layout fails the build, not the kernel.
var (
	_ [120]byte = [unsafe.Sizeof(params{})]byte{}
	_ [64]byte  = [unsafe.Sizeof(sqe{})]byte{}
	_ [16]byte  = [unsafe.Sizeof(cqe{})]byte{}
	_ [32]byte  = [unsafe.Sizeof(rsrcRegister{})]byte{}
	_ [32]byte  = [unsafe.Sizeof(rsrcUpdate2{})]byte{}
	_ [16]byte  = [unsafe.Sizeof(filesUpdate{})]byte{}
	_ [16]byte  = [unsafe.Sizeof(probeHeader{})]byte{}
	_ [8]byte   = [unsafe.Sizeof(probeOp{})]byte{}
)
