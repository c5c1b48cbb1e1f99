package broker

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// OffsetMsgID is RocketMQ's broker-side message id: the store host (IPv4,
// or IPv6) and port, and the record's CommitLog offset, in upper-case hex.
func OffsetMsgID(storeHost netip.AddrPort, physicalOffset int64) string {
	addr := storeHost.Addr().Unmap()
	b := addr.AsSlice()
	b = binary.BigEndian.AppendUint32(b, uint32(storeHost.Port()))
	b = binary.BigEndian.AppendUint64(b, uint64(physicalOffset))
	return strings.ToUpper(hex.EncodeToString(b))
}

// ParseOffsetMsgID reads an offset message id back: host and CommitLog
// offset.
func ParseOffsetMsgID(id string) (netip.AddrPort, int64, error) {
	b, err := hex.DecodeString(id)
	if err != nil || (len(b) != 16 && len(b) != 28) {
		return netip.AddrPort{}, 0, fmt.Errorf("message id %q is not 32 (IPv4) or 56 (IPv6) hex digits", id)
	}
	ipLen := len(b) - 12
	addr, _ := netip.AddrFromSlice(b[:ipLen])
	port := binary.BigEndian.Uint32(b[ipLen:])
	off := int64(binary.BigEndian.Uint64(b[ipLen+4:]))
	if port > 65535 || off < 0 {
		return netip.AddrPort{}, 0, fmt.Errorf("message id %q has port %d and offset %d", id, port, off)
	}
	return netip.AddrPortFrom(addr, uint16(port)), off, nil
}

// uniqIDs makes UNIQ_KEYs for messages that arrive without one (batch
// members): the broker's address and pid, then a counter seeded from the
// clock — 32 hex digits, like a client's.
type uniqIDs struct {
	prefix  string
	counter atomic.Uint64
}

func (u *uniqIDs) init(host netip.AddrPort) {
	b := host.Addr().Unmap().AsSlice()
	if len(b) > 4 {
		b = b[len(b)-4:]
	}
	b = binary.BigEndian.AppendUint16(b, uint16(host.Port()))
	b = binary.BigEndian.AppendUint32(b, uint32(os.Getpid()))
	u.prefix = strings.ToUpper(hex.EncodeToString(b))
	u.counter.Store(uint64(time.Now().UnixNano()))
}

func (u *uniqIDs) next() string {
	var b [6]byte
	n := u.counter.Add(1)
	binary.BigEndian.PutUint16(b[:2], uint16(n>>32))
	binary.BigEndian.PutUint32(b[2:], uint32(n))
	return u.prefix + hex.EncodeToString(b[:])
}

func encodeJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("broker: encode " + err.Error())
	}
	return b
}
