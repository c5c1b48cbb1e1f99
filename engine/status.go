package engine

import (
	"errors"
	"fmt"
)

// PutStatus is the outcome of a Put, modelled on RocketMQ's PutMessageStatus.
type PutStatus int

const (
	// PutOK: appended, and durable when the flush mode is sync.
	PutOK PutStatus = iota
	// FlushDiskTimeout: appended, but the sync flush did not confirm within
	// SyncFlushTimeout. The record may still become durable (the flush may
	// finish later) or may be lost in a crash: the producer does not know.
	FlushDiskTimeout
	// CreateMappedFileFailed: the next segment could not be created in time.
	CreateMappedFileFailed
	// MessageIllegal: the message breaks an input rule (size, topic, queue id).
	MessageIllegal
	// PropertiesSizeExceeded: the encoded properties exceed 32767 bytes.
	PropertiesSizeExceeded
	// ServiceNotAvailable: the store is closed or stopped writing after an
	// I/O error.
	ServiceNotAvailable
	// OSPageCacheBusy: the append lock has been held too long; try later.
	OSPageCacheBusy
	// UnknownError: anything else.
	UnknownError
	// FlushSlaveTimeout: SYNC_MASTER: appended (and flushed as the flush
	// mode asks), but no slave acknowledged the record within SlaveTimeout.
	// The record stays on the master and may still reach a slave.
	FlushSlaveTimeout
	// SlaveNotAvailable: SYNC_MASTER: appended, but no slave is connected,
	// or the best one is more than HASlaveFallbehindMax behind, so the Put
	// did not wait. The record stays on the master.
	SlaveNotAvailable
	// InSyncReplicasNotEnough: SYNC_MASTER with MinInSyncReplicas: appended,
	// but fewer slaves than MinInSyncReplicas are in the in-sync set, so
	// the Put did not wait. The record stays on the master.
	InSyncReplicasNotEnough
)

func (s PutStatus) String() string {
	switch s {
	case PutOK:
		return "PUT_OK"
	case FlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case CreateMappedFileFailed:
		return "CREATE_MAPPED_FILE_FAILED"
	case MessageIllegal:
		return "MESSAGE_ILLEGAL"
	case PropertiesSizeExceeded:
		return "PROPERTIES_SIZE_EXCEEDED"
	case ServiceNotAvailable:
		return "SERVICE_NOT_AVAILABLE"
	case OSPageCacheBusy:
		return "OS_PAGE_CACHE_BUSY"
	case UnknownError:
		return "UNKNOWN_ERROR"
	case FlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case InSyncReplicasNotEnough:
		return "IN_SYNC_REPLICAS_NOT_ENOUGH"
	case SlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	}
	return fmt.Sprintf("PutStatus(%d)", int(s))
}

// Sentinel errors; test with errors.Is. A Put that does not return PutOK
// returns an error wrapping the one for its status.
var (
	ErrFlushDiskTimeout     = errors.New("engine: flush to disk timed out; the message may or may not be durable")
	ErrCreateSegmentFailed  = errors.New("engine: could not create the next CommitLog segment")
	ErrMessageIllegal       = errors.New("engine: illegal message")
	ErrPropertiesTooLarge   = errors.New("engine: properties too large")
	ErrServiceNotAvailable  = errors.New("engine: store not available for writing")
	ErrOSPageCacheBusy      = errors.New("engine: OS page cache busy (append lock held too long)")
	ErrInvalidOption        = errors.New("engine: invalid option")
	ErrConfigMismatch       = errors.New("engine: store was created with other parameters")
	ErrClosed               = errors.New("engine: store closed")
	ErrLocked               = errors.New("engine: store is locked by another process")
	ErrCorrupt              = errors.New("engine: corrupt store")
	ErrUnknownBackend       = errors.New("engine: unknown backend")
	ErrNotFound             = errors.New("engine: not found")
	errAllocationTimeout    = errors.New("engine: segment allocation timed out")
	errGroupCommitQueueFull = errors.New("engine: group commit queue full")

	// Replication (see replicate.go and package ha).
	ErrFlushSlaveTimeout = errors.New("engine: no slave acknowledged the message in time; it is stored on the master")
	ErrSlaveNotAvailable = errors.New("engine: no slave available (none connected, or too far behind); the message is stored on the master")
	// ErrInSyncReplicasNotEnough: fewer slaves in the in-sync set than
	// MinInSyncReplicas.
	ErrInSyncReplicasNotEnough = errors.New("engine: fewer in-sync slaves than MinInSyncReplicas; the message is stored on the master")
	ErrSlaveReadOnly           = errors.New("engine: the store is a slave: it takes only what its master replicates; put to the master")
	ErrNotSlave                = errors.New("engine: replicated bytes can only be appended to a slave store")
	// ErrReplicaOffset: replicated bytes for an offset other than where the
	// slave's CommitLog ends.
	ErrReplicaOffset = errors.New("engine: replicated bytes are not for the end of the slave's CommitLog")
	// ErrReplicaData: replicated bytes that are not valid records (bad CRC,
	// length or position, a queue offset out of sequence).
	ErrReplicaData = errors.New("engine: replicated bytes are not valid CommitLog records")
	// ErrReplicaMismatch: the master's records do not fit this slave's
	// configuration (segment size, maximum message size).
	ErrReplicaMismatch = errors.New("engine: the master's CommitLog does not fit this slave's configuration")
	// ErrOffsetDeleted: a CommitLog offset below the first one still stored.
	ErrOffsetDeleted = errors.New("engine: CommitLog offset no longer stored")
	// ErrOffsetBeyondEnd: a CommitLog offset past the readable end.
	ErrOffsetBeyondEnd = errors.New("engine: CommitLog offset past the end")
)

func statusError(s PutStatus) error {
	switch s {
	case PutOK:
		return nil
	case FlushDiskTimeout:
		return ErrFlushDiskTimeout
	case CreateMappedFileFailed:
		return ErrCreateSegmentFailed
	case MessageIllegal:
		return ErrMessageIllegal
	case PropertiesSizeExceeded:
		return ErrPropertiesTooLarge
	case ServiceNotAvailable:
		return ErrServiceNotAvailable
	case OSPageCacheBusy:
		return ErrOSPageCacheBusy
	case FlushSlaveTimeout:
		return ErrFlushSlaveTimeout
	case SlaveNotAvailable:
		return ErrSlaveNotAvailable
	case InSyncReplicasNotEnough:
		return ErrInSyncReplicasNotEnough
	}
	return errors.New("engine: unknown put error")
}
