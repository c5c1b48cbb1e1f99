package ha

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
)

// RocketMQ's defaults (MessageStoreConfig), and mqstore's own where
// RocketMQ hard-codes a value.
const (
	DefaultListenAddr            = "127.0.0.1:10912" // haListenPort (RocketMQ: all interfaces)
	DefaultSendHeartbeatInterval = 5 * time.Second   // haSendHeartbeatInterval
	DefaultHousekeepingInterval  = 20 * time.Second  // haHousekeepingInterval
	DefaultTransferBatchSize     = 32 << 10          // haTransferBatchSize
	// DefaultMaxFrameBytes is the largest frame a slave accepts: RocketMQ's
	// HAClient reads into a 4 MiB buffer (READ_MAX_BUFFER_SIZE).
	DefaultMaxFrameBytes = 4 << 20
	// DefaultReconnectMinBackoff and DefaultReconnectMaxBackoff bound the
	// slave's wait between connection attempts, doubling from the first to
	// the second; RocketMQ waits a fixed 5 s.
	DefaultReconnectMinBackoff = 100 * time.Millisecond
	DefaultReconnectMaxBackoff = 5 * time.Second
	// DefaultDialTimeout bounds one connection attempt (RocketMQ's
	// RemotingUtil.connect: 5 s).
	DefaultDialTimeout = 5 * time.Second
	// DefaultMaxConnections caps a master's open HA connections (RocketMQ
	// has no cap): a slave or two, repair probes, and room to spare.
	DefaultMaxConnections = 32
)

// ErrInvalidOption marks a bad option value; the error says which.
var ErrInvalidOption = errors.New("ha: invalid option")

// EmptySlaveStart is where the master starts a slave whose CommitLog is
// empty (it reports offset 0).
type EmptySlaveStart int

const (
	// StartAtMinOffset copies the master's whole CommitLog, from the first
	// offset it still stores. mqstore's default: a slave exists so that
	// losing the master loses nothing, and one started "from the last
	// segment" lacks every older message — after a failover, consumers of
	// older offsets get OFFSET_TOO_SMALL and those messages exist nowhere
	// else once the master's disk is gone.
	StartAtMinOffset EmptySlaveStart = iota
	// StartAtLastSegment starts at the beginning of the master's newest
	// segment, as RocketMQ 4.x does (HAConnection: maxOffset − maxOffset %
	// mapedFileSizeCommitLog): a new slave is in sync within one segment's
	// copy instead of a copy of the whole retained log (which, at 72 h of
	// retention on a busy broker, can be terabytes). Choose it when that
	// copy is too long and the older messages need no second copy.
	StartAtLastSegment
)

func (e EmptySlaveStart) String() string {
	switch e {
	case StartAtMinOffset:
		return "min-offset"
	case StartAtLastSegment:
		return "last-segment"
	}
	return fmt.Sprintf("EmptySlaveStart(%d)", int(e))
}

// ParseEmptySlaveStart parses "min-offset" (or "full") and "last-segment".
func ParseEmptySlaveStart(s string) (EmptySlaveStart, error) {
	switch strings.ToLower(s) {
	case "min-offset", "full", "":
		return StartAtMinOffset, nil
	case "last-segment":
		return StartAtLastSegment, nil
	}
	return 0, fmt.Errorf("empty-slave start %q: want min-offset or last-segment: %w", s, ErrInvalidOption)
}

// MasterOptions configure a Master. The zero value of a field means its
// default.
type MasterOptions struct {
	// ListenAddr is where slaves connect (RocketMQ's haListenPort, port
	// 10912, but on loopback unless told otherwise: RocketMQ listens on
	// all interfaces). "127.0.0.1:0" picks a free port (Addr says which).
	// An address beyond loopback needs TLS or Secret.
	ListenAddr string
	// TLS, when set, is the master's TLS configuration (LoadTLS): TLS 1.3,
	// and every slave must present a certificate ClientCAs verifies.
	TLS *tls.Config
	// Secret, when set, is a shared secret every slave must prove it
	// holds (an HMAC challenge–response) before its first report; with
	// TLS too, both are required.
	Secret []byte
	// SendHeartbeatInterval: an idle connection gets an empty frame this
	// often (haSendHeartbeatInterval, 5 s).
	SendHeartbeatInterval time.Duration
	// HousekeepingInterval: a connection whose slave said nothing (it
	// reports at least every heartbeat interval) for this long is dropped,
	// and so is one whose frame could not be written for this long
	// (haHousekeepingInterval, 20 s).
	HousekeepingInterval time.Duration
	// TransferBatchSize is the most CommitLog bytes in one frame
	// (haTransferBatchSize, 32 KiB); at most DefaultMaxFrameBytes, what a
	// slave accepts.
	TransferBatchSize int
	// EmptySlaveStart is where an empty slave starts (StartAtMinOffset).
	EmptySlaveStart EmptySlaveStart
	// MaxConnections caps the open connections (DefaultMaxConnections);
	// one more is closed as soon as it is accepted.
	MaxConnections int
	// Listener, when set, is used instead of listening on ListenAddr
	// (which is then ignored); Close closes it.
	Listener net.Listener
	// Logger receives connection events and refusals (slog.Default());
	// lines about peers that are not slaves are rate-limited.
	Logger *slog.Logger
}

func (o MasterOptions) withDefaults() MasterOptions {
	if o.ListenAddr == "" {
		o.ListenAddr = DefaultListenAddr
	}
	if o.SendHeartbeatInterval == 0 {
		o.SendHeartbeatInterval = DefaultSendHeartbeatInterval
	}
	if o.HousekeepingInterval == 0 {
		o.HousekeepingInterval = DefaultHousekeepingInterval
	}
	if o.TransferBatchSize == 0 {
		o.TransferBatchSize = DefaultTransferBatchSize
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o MasterOptions) validate() error {
	switch {
	case o.SendHeartbeatInterval < 0:
		return badOption("SendHeartbeatInterval %v is negative", o.SendHeartbeatInterval)
	case o.HousekeepingInterval < 0:
		return badOption("HousekeepingInterval %v is negative", o.HousekeepingInterval)
	case o.HousekeepingInterval <= o.SendHeartbeatInterval:
		return badOption("HousekeepingInterval %v must exceed SendHeartbeatInterval %v, or an idle, healthy connection is dropped",
			o.HousekeepingInterval, o.SendHeartbeatInterval)
	case o.TransferBatchSize <= 0:
		return badOption("TransferBatchSize %d is not positive", o.TransferBatchSize)
	case o.TransferBatchSize > DefaultMaxFrameBytes:
		return badOption("TransferBatchSize %d exceeds %d, the largest frame a slave accepts", o.TransferBatchSize, DefaultMaxFrameBytes)
	case o.EmptySlaveStart != StartAtMinOffset && o.EmptySlaveStart != StartAtLastSegment:
		return badOption("EmptySlaveStart %d is unknown", o.EmptySlaveStart)
	case o.MaxConnections < 0:
		return badOption("MaxConnections %d is negative", o.MaxConnections)
	case o.Secret != nil && len(o.Secret) < MinSecretBytes:
		return badOption("the shared secret is %d bytes, fewer than %d", len(o.Secret), MinSecretBytes)
	case o.TLS != nil && o.TLS.MinVersion < tls.VersionTLS13:
		return badOption("TLS must be 1.3 (MinVersion tls.VersionTLS13); use LoadTLS")
	case o.TLS != nil && (o.TLS.ClientAuth != tls.RequireAndVerifyClientCert || o.TLS.ClientCAs == nil):
		return badOption("TLS must require and verify the slaves' certificates (ClientAuth RequireAndVerifyClientCert, ClientCAs); use LoadTLS")
	}
	addr := o.ListenAddr
	if o.Listener != nil {
		addr = o.Listener.Addr().String()
	} else if _, _, err := net.SplitHostPort(addr); err != nil {
		return badOption("ListenAddr %q: %v", addr, err)
	}
	if !IsLoopback(addr) && o.TLS == nil && o.Secret == nil {
		return badOption("the HA address %s is reachable beyond this machine: it streams the whole CommitLog and counts acknowledgements, "+
			"so it needs TLS (--tls-cert, --tls-key, --tls-ca) or a shared secret (--ha-secret-file); or listen on 127.0.0.1", addr)
	}
	return nil
}

// SlaveOptions configure a Slave. The zero value of a field means its
// default.
type SlaveOptions struct {
	// MasterAddress is the master's HA address, host:port (RocketMQ's
	// haMasterAddress). Required.
	MasterAddress string
	// SendHeartbeatInterval: the slave reports its offset when it advances
	// and at least this often (haSendHeartbeatInterval, 5 s).
	SendHeartbeatInterval time.Duration
	// HousekeepingInterval: a master connection silent this long (the
	// master sends an empty frame every heartbeat interval when idle) is
	// dropped and made again (haHousekeepingInterval, 20 s).
	HousekeepingInterval time.Duration
	// ReconnectMinBackoff and ReconnectMaxBackoff bound the wait between
	// connection attempts (100 ms doubling to 5 s).
	ReconnectMinBackoff time.Duration
	ReconnectMaxBackoff time.Duration
	// DialTimeout bounds one connection attempt (5 s).
	DialTimeout time.Duration
	// MaxFrameBytes is the largest frame accepted (4 MiB); a larger one is
	// a protocol error (not an HA master?).
	MaxFrameBytes int
	// TLS, when set, is the slave's TLS configuration (LoadTLS): it
	// verifies the master's certificate and presents its own.
	TLS *tls.Config
	// Secret, when set, is the shared secret of the master's
	// challenge–response (the master proves it holds it too).
	Secret []byte
	// EpochHandshake: on every connection the slave first sends its epoch
	// history and the master answers their fork point; a slave whose log
	// runs past it compares the record before it with the master's, cuts
	// its log there (engine.Store.TruncateOnline, the cut bytes kept) and
	// replicates from it, recording the master's epochs as their bytes
	// arrive (see epoch.go). For brokers that follow the controller, whose
	// all-in-sync acknowledgement proves the cut bytes were never
	// acknowledged. Off: the classic protocol, in which a diverged slave
	// stops (ErrDiverged) until repaired by hand.
	EpochHandshake bool
	// Logger receives connection events (slog.Default()).
	Logger *slog.Logger
}

func (o SlaveOptions) withDefaults() SlaveOptions {
	if o.SendHeartbeatInterval == 0 {
		o.SendHeartbeatInterval = DefaultSendHeartbeatInterval
	}
	if o.HousekeepingInterval == 0 {
		o.HousekeepingInterval = DefaultHousekeepingInterval
	}
	if o.ReconnectMinBackoff == 0 {
		o.ReconnectMinBackoff = DefaultReconnectMinBackoff
	}
	if o.ReconnectMaxBackoff == 0 {
		o.ReconnectMaxBackoff = DefaultReconnectMaxBackoff
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxFrameBytes == 0 {
		o.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o SlaveOptions) validate() error {
	switch {
	case o.MasterAddress == "":
		return badOption("MasterAddress is required")
	case o.SendHeartbeatInterval < 0:
		return badOption("SendHeartbeatInterval %v is negative", o.SendHeartbeatInterval)
	case o.HousekeepingInterval < 0:
		return badOption("HousekeepingInterval %v is negative", o.HousekeepingInterval)
	case o.HousekeepingInterval <= o.SendHeartbeatInterval:
		return badOption("HousekeepingInterval %v must exceed SendHeartbeatInterval %v (the master's heartbeats keep a healthy connection alive)",
			o.HousekeepingInterval, o.SendHeartbeatInterval)
	case o.ReconnectMinBackoff < 0 || o.ReconnectMaxBackoff < 0 || o.DialTimeout < 0:
		return badOption("a reconnect backoff or the dial timeout is negative")
	case o.ReconnectMinBackoff > o.ReconnectMaxBackoff:
		return badOption("ReconnectMinBackoff %v exceeds ReconnectMaxBackoff %v", o.ReconnectMinBackoff, o.ReconnectMaxBackoff)
	case o.MaxFrameBytes < 64<<10:
		return badOption("MaxFrameBytes %d is below 64 KiB", o.MaxFrameBytes)
	case o.Secret != nil && len(o.Secret) < MinSecretBytes:
		return badOption("the shared secret is %d bytes, fewer than %d", len(o.Secret), MinSecretBytes)
	case o.TLS != nil && o.TLS.MinVersion < tls.VersionTLS13:
		return badOption("TLS must be 1.3 (MinVersion tls.VersionTLS13); use LoadTLS")
	}
	if _, _, err := net.SplitHostPort(o.MasterAddress); err != nil {
		return badOption("MasterAddress %q: %v", o.MasterAddress, err)
	}
	return nil
}

func badOption(format string, args ...any) error {
	return fmt.Errorf("ha: %s: %w", fmt.Sprintf(format, args...), ErrInvalidOption)
}

// Validate checks the options (with their defaults applied) as NewMaster
// does, so a command can refuse a bad value before it opens a store.
func (o MasterOptions) Validate() error { return o.withDefaults().validate() }

// Validate checks the options (with their defaults applied) as NewSlave
// does.
func (o SlaveOptions) Validate() error { return o.withDefaults().validate() }
