// Package remoting speaks Apache RocketMQ's remoting protocol: the
// length-prefixed frame, its JSON header (and the binary "ROCKETMQ" header,
// decoded on receive and answered in kind), and a connection that carries
// requests both ways, multiplexed by opaque, with concurrent dispatch and
// ordered writes. Package namesrv and package broker build on it.
//
// A frame is
//
//	length int32 | serialize type byte, header length 24 bits | header | body
//
// where length counts everything after itself (4 + header + body), all
// big-endian.
package remoting

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Flag bits of a command.
const (
	FlagResponse int32 = 1 // the command answers a request with the same opaque
	FlagOneway   int32 = 2 // the sender wants no response
)

// Serialize types (the top byte of the header-length word).
const (
	SerializeJSON     byte = 0
	SerializeRocketMQ byte = 1
)

// Version is the protocol version the server writes into its commands
// (RocketMQ 4.9.4's ordinal; clients only record it).
const Version int16 = 401

// Sentinel errors; test with errors.Is.
var (
	// ErrMalformed: the bytes are not a valid frame or header. The
	// connection that sent them is dropped.
	ErrMalformed = errors.New("remoting: malformed frame")
	// ErrFrameTooLarge: a frame's length exceeds the receiver's cap.
	ErrFrameTooLarge = errors.New("remoting: frame too large")
	// ErrClosed: the connection or server is closed.
	ErrClosed = errors.New("remoting: closed")
	// ErrBusy: too many requests in flight on a connection.
	ErrBusy = errors.New("remoting: too many requests in flight")
)

// Command is one request or response.
type Command struct {
	Code      int16
	Language  string // "GO", "JAVA", …; the server writes "GO"
	Version   int16
	Opaque    int32
	Flag      int32
	Remark    string
	ExtFields map[string]string
	Body      []byte

	// SerializeType is how the header is (or will be) encoded.
	SerializeType byte

	// BodyLen and WriteBody, when WriteBody is set, replace Body in an
	// outgoing command: WriteBody writes exactly BodyLen bytes to the
	// connection (a pull response sends stored records with sendfile).
	BodyLen   int64
	WriteBody func(ctx context.Context, w io.Writer) (int64, error)
	// Done, when set, is called once the command was written (or could not
	// be): it releases what WriteBody read from.
	Done func()
}

// IsResponse reports whether the response flag is set.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// IsOneway reports whether the oneway flag is set.
func (c *Command) IsOneway() bool { return c.Flag&FlagOneway != 0 }

// NewRequest returns a request with the given code and ext fields.
func NewRequest(code int16, ext map[string]string, body []byte) *Command {
	return &Command{Code: code, Language: "GO", Version: Version, ExtFields: ext, Body: body}
}

// NewResponse returns a response to req with the code and remark, in the
// request's serialize type.
func NewResponse(req *Command, code int16, remark string) *Command {
	return &Command{Code: code, Language: "GO", Version: Version, Opaque: req.Opaque, Flag: FlagResponse,
		Remark: remark, ExtFields: map[string]string{}, SerializeType: req.SerializeType}
}

// Set sets an ext field.
func (c *Command) Set(key, value string) {
	if c.ExtFields == nil {
		c.ExtFields = map[string]string{}
	}
	c.ExtFields[key] = value
}

// SetInt sets an ext field to a decimal number.
func (c *Command) SetInt(key string, v int64) { c.Set(key, strconv.FormatInt(v, 10)) }

// Field returns an ext field ("" when absent).
func (c *Command) Field(key string) string { return c.ExtFields[key] }

// Int parses an ext field as a decimal integer. A missing field gives def;
// a field that is not a number is an error naming it.
func (c *Command) Int(key string, def int64) (int64, error) {
	v, ok := c.ExtFields[key]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("header field %s=%q is not an integer", key, v)
	}
	return n, nil
}

// Bool parses an ext field as true/false; a missing field gives def.
func (c *Command) Bool(key string, def bool) (bool, error) {
	v, ok := c.ExtFields[key]
	if !ok || v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("header field %s=%q is not true or false", key, v)
	}
	return b, nil
}

func (c *Command) String() string {
	kind := "request"
	if c.IsResponse() {
		kind = "response"
	}
	return fmt.Sprintf("%s code=%d opaque=%d flag=%d", kind, c.Code, c.Opaque, c.Flag)
}
