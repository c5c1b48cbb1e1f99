package remoting

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
)

// DefaultMaxFrameBytes caps an incoming frame (RocketMQ's frameMaxLength).
const DefaultMaxFrameBytes = 16 << 20

// maxHeaderBytes is the largest header the 24-bit length can describe.
const maxHeaderBytes = 1<<24 - 1

// jsonHeader is the JSON header, fields in the order RocketMQ's clients
// write them.
type jsonHeader struct {
	Code                    int16             `json:"code"`
	Language                string            `json:"language"`
	Version                 int16             `json:"version"`
	Opaque                  int32             `json:"opaque"`
	Flag                    int32             `json:"flag"`
	Remark                  string            `json:"remark,omitempty"`
	ExtFields               map[string]string `json:"extFields,omitempty"`
	SerializeTypeCurrentRPC string            `json:"serializeTypeCurrentRPC,omitempty"`
}

// languages are RocketMQ's LanguageCode values, for the binary header.
var languages = []string{"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST"}

func languageCode(name string) byte {
	for i, l := range languages {
		if l == name {
			return byte(i)
		}
	}
	return 7 // OTHER
}

func languageName(code byte) string {
	if int(code) < len(languages) {
		return languages[code]
	}
	return "OTHER"
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// ReadFrame reads one frame from r: the length word, then that many bytes,
// refusing a length above maxFrame (DefaultMaxFrameBytes when ≤ 0) before
// reading it. Errors other than io.EOF at a frame boundary wrap
// ErrMalformed, ErrFrameTooLarge or the read error.
func ReadFrame(r io.Reader, maxFrame int) (*Command, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameBytes
	}
	var word [4]byte
	if _, err := io.ReadFull(r, word[:]); err != nil {
		return nil, err // io.EOF: the peer closed between frames
	}
	length := int64(int32(binary.BigEndian.Uint32(word[:])))
	switch {
	case length < 4:
		return nil, malformed("frame length %d is less than the 4-byte header-length word", length)
	case length > int64(maxFrame):
		return nil, fmt.Errorf("%w: frame length %d exceeds the cap of %d bytes", ErrFrameTooLarge, length, maxFrame)
	}
	frame := make([]byte, length)
	if _, err := io.ReadFull(r, frame); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read frame of %d bytes: %w", length, err)
	}
	return DecodeFrame(frame)
}

// DecodeFrame decodes a frame without its length word (the header-length
// word, the header and the body). The body aliases frame.
func DecodeFrame(frame []byte) (*Command, error) {
	if len(frame) < 4 {
		return nil, malformed("frame of %d bytes has no header-length word", len(frame))
	}
	word := binary.BigEndian.Uint32(frame)
	kind := byte(word >> 24)
	hlen := int(word & maxHeaderBytes)
	if hlen > len(frame)-4 {
		return nil, malformed("header length %d exceeds the frame's %d bytes after the header-length word", hlen, len(frame)-4)
	}
	header := frame[4 : 4+hlen]
	var c *Command
	var err error
	switch kind {
	case SerializeJSON:
		c, err = decodeJSONHeader(header)
	case SerializeRocketMQ:
		c, err = decodeBinaryHeader(header)
	default:
		return nil, malformed("unknown serialize type %d", kind)
	}
	if err != nil {
		return nil, err
	}
	c.SerializeType = kind
	if body := frame[4+hlen:]; len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

func decodeJSONHeader(b []byte) (*Command, error) {
	var h jsonHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, malformed("JSON header: %v", err)
	}
	return &Command{Code: h.Code, Language: h.Language, Version: h.Version, Opaque: h.Opaque, Flag: h.Flag,
		Remark: h.Remark, ExtFields: h.ExtFields}, nil
}

// binaryReader reads the binary header's fields, remembering the first
// shortfall.
type binaryReader struct {
	b   []byte
	err error
}

func (r *binaryReader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = malformed("binary header: %s needs %d bytes, %d left", what, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *binaryReader) u16(what string) int {
	if v := r.take(2, what); v != nil {
		return int(binary.BigEndian.Uint16(v))
	}
	return 0
}

func (r *binaryReader) u32(what string) uint32 {
	if v := r.take(4, what); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func decodeBinaryHeader(b []byte) (*Command, error) {
	r := &binaryReader{b: b}
	c := &Command{}
	c.Code = int16(r.u16("code"))
	if v := r.take(1, "language"); v != nil {
		c.Language = languageName(v[0])
	}
	c.Version = int16(r.u16("version"))
	c.Opaque = int32(r.u32("opaque"))
	c.Flag = int32(r.u32("flag"))
	remarkLen := int32(r.u32("remark length"))
	c.Remark = string(r.take(int(remarkLen), "remark"))
	extLen := int32(r.u32("ext fields length"))
	ext := r.take(int(extLen), "ext fields")
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, malformed("binary header: %d bytes after the ext fields", len(r.b))
	}
	if len(ext) > 0 {
		c.ExtFields = map[string]string{}
		er := &binaryReader{b: ext}
		for len(er.b) > 0 && er.err == nil {
			k := er.take(er.u16("ext key length"), "ext key")
			v := er.take(int(int32(er.u32("ext value length"))), "ext value")
			if er.err == nil {
				c.ExtFields[string(k)] = string(v)
			}
		}
		if er.err != nil {
			return nil, er.err
		}
	}
	return c, nil
}

// encodeHeader returns c's header in its serialize type.
func encodeHeader(c *Command) ([]byte, error) {
	switch c.SerializeType {
	case SerializeJSON:
		h := jsonHeader{Code: c.Code, Language: c.Language, Version: c.Version, Opaque: c.Opaque, Flag: c.Flag,
			Remark: c.Remark, ExtFields: c.ExtFields}
		if h.Language == "" {
			h.Language = "GO"
		}
		return json.Marshal(&h)
	case SerializeRocketMQ:
		return encodeBinaryHeader(c)
	}
	return nil, fmt.Errorf("encode %v: unknown serialize type %d", c, c.SerializeType)
}

func encodeBinaryHeader(c *Command) ([]byte, error) {
	keys := make([]string, 0, len(c.ExtFields))
	extLen := 0
	for k, v := range c.ExtFields {
		if len(k) > math.MaxUint16 {
			return nil, fmt.Errorf("encode %v: ext key of %d bytes is too long", c, len(k))
		}
		keys = append(keys, k)
		extLen += 2 + len(k) + 4 + len(v)
	}
	sort.Strings(keys)
	b := make([]byte, 0, 2+1+2+4+4+4+len(c.Remark)+4+extLen)
	b = binary.BigEndian.AppendUint16(b, uint16(c.Code))
	b = append(b, languageCode(c.Language))
	b = binary.BigEndian.AppendUint16(b, uint16(c.Version))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Opaque))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Flag))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Remark)))
	b = append(b, c.Remark...)
	b = binary.BigEndian.AppendUint32(b, uint32(extLen))
	for _, k := range keys {
		v := c.ExtFields[k]
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b, nil
}

// bodyLen is the length of the body c will carry.
func bodyLen(c *Command) int64 {
	if c.WriteBody != nil {
		return c.BodyLen
	}
	return int64(len(c.Body))
}

// AppendFrame appends c's frame to dst: the length word, the
// header-length word, the header and, unless WriteBody streams it, the
// body.
func AppendFrame(dst []byte, c *Command) ([]byte, error) {
	header, err := encodeHeader(c)
	if err != nil {
		return dst, err
	}
	if len(header) > maxHeaderBytes {
		return dst, fmt.Errorf("encode %v: header of %d bytes exceeds the 24-bit length", c, len(header))
	}
	length := 4 + int64(len(header)) + bodyLen(c)
	if length > math.MaxInt32 {
		return dst, fmt.Errorf("encode %v: frame of %d bytes exceeds the 32-bit length", c, length)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(length))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.SerializeType)<<24|uint32(len(header)))
	dst = append(dst, header...)
	if c.WriteBody == nil {
		dst = append(dst, c.Body...)
	}
	return dst, nil
}
