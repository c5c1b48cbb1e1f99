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
	}
	return errors.New("engine: unknown put error")
}
