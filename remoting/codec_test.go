package remoting

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"testing"
)

// goClientRouteRequest is the frame rocketmq-client-go writes for a route
// query of topic "test" (its JSON header is 103 bytes; the frame 111).
const goClientRouteRequest = `{"code":105,"language":"GO","version":317,"opaque":1,"flag":0,"remark":"","extFields":{"topic":"test"}}`

func frameOf(kind byte, header, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(kind)<<24|uint32(len(header)))
	b = append(b, header...)
	return append(b, body...)
}

func TestDecodeGoClientRequest(t *testing.T) {
	frame := frameOf(SerializeJSON, []byte(goClientRouteRequest), nil)
	if len(frame) != 111 || hex.EncodeToString(frame[:8]) != "0000006b00000067" {
		t.Fatalf("frame is %d bytes starting %x; the client's is 111 starting 0000006b00000067", len(frame), frame[:8])
	}
	c, err := ReadFrame(bytes.NewReader(frame), 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Code != 105 || c.Language != "GO" || c.Version != 317 || c.Opaque != 1 || c.Flag != 0 || c.Field("topic") != "test" ||
		c.SerializeType != SerializeJSON || c.Body != nil {
		t.Fatalf("decoded %+v", c)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, kind := range []byte{SerializeJSON, SerializeRocketMQ} {
		in := &Command{Code: 10, Language: "JAVA", Version: 401, Opaque: -7, Flag: FlagResponse | FlagOneway, Remark: "ré\x00mark",
			ExtFields: map[string]string{"topic": "t", "properties": "a\x01b\x02", "": "empty key"}, Body: []byte("body\x00bytes"),
			SerializeType: kind}
		frame, err := AppendFrame(nil, in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ReadFrame(bytes.NewReader(frame), 0)
		if err != nil {
			t.Fatalf("type %d: %v", kind, err)
		}
		if out.Code != in.Code || out.Language != in.Language || out.Version != in.Version || out.Opaque != in.Opaque ||
			out.Flag != in.Flag || out.Remark != in.Remark || !maps.Equal(out.ExtFields, in.ExtFields) ||
			!bytes.Equal(out.Body, in.Body) || out.SerializeType != kind {
			t.Fatalf("type %d: sent %+v, decoded %+v", kind, in, out)
		}
	}
}

func TestResponseFieldsAreStrings(t *testing.T) {
	req := &Command{Opaque: 42, SerializeType: SerializeJSON}
	resp := NewResponse(req, 0, "")
	resp.SetInt("queueOffset", 12)
	frame, err := AppendFrame(nil, resp)
	if err != nil {
		t.Fatal(err)
	}
	header := frame[8:]
	if !bytes.Contains(header, []byte(`"queueOffset":"12"`)) || !bytes.Contains(header, []byte(`"opaque":42`)) ||
		!bytes.Contains(header, []byte(`"flag":1`)) {
		t.Fatalf("header %s: ext values must be JSON strings, the opaque echoed and the response bit set", header)
	}
}

func TestMalformedFrames(t *testing.T) {
	huge := binary.BigEndian.AppendUint32(nil, DefaultMaxFrameBytes+1)
	cases := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"length below the header word", []byte{0, 0, 0, 3, 0, 0, 0}, ErrMalformed},
		{"negative length", []byte{0xff, 0xff, 0xff, 0xff}, ErrMalformed},
		{"over the cap", huge, ErrFrameTooLarge},
		{"header longer than the frame", frameOf(0, nil, nil)[:4:4], nil},
		{"unknown serialize type", frameOf(2, []byte("{}"), nil), ErrMalformed},
		{"not JSON", frameOf(0, []byte("{code:1"), nil), ErrMalformed},
		{"number in extFields", frameOf(0, []byte(`{"code":1,"extFields":{"queueId":0}}`), nil), ErrMalformed},
		{"code as a string", frameOf(0, []byte(`{"code":"1"}`), nil), ErrMalformed},
		{"binary header cut short", frameOf(1, []byte{0, 1, 9}, nil), ErrMalformed},
		{"binary remark past the end", frameOf(1, append(make([]byte, 13), 0, 0, 1, 0), nil), ErrMalformed},
	}
	cases[3].frame = []byte{0, 0, 0, 8, 0, 0, 0, 9, 'x', 'x', 'x', 'x'}
	cases[3].want = ErrMalformed
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tc.frame), 0)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestFrameCapReadsNothingMore(t *testing.T) {
	// Only the length word is there: a frame over the cap is refused before
	// its bytes are read (or allocated).
	r := &countingReader{r: bytes.NewReader(binary.BigEndian.AppendUint32(nil, 1<<30))}
	if _, err := ReadFrame(r, 1<<20); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v", err)
	}
	if r.n != 4 {
		t.Fatalf("read %d bytes; want only the 4-byte length", r.n)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(frameOf(0, []byte(goClientRouteRequest), []byte("body"))[4:])
	bin, _ := AppendFrame(nil, &Command{Code: 11, Remark: "r", ExtFields: map[string]string{"a": "b"}, SerializeType: SerializeRocketMQ})
	f.Add(bin[4:])
	f.Add([]byte{1, 0, 0, 2, 0})
	f.Fuzz(func(t *testing.T, frame []byte) {
		c, err := DecodeFrame(frame)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// What decodes re-encodes to a frame that decodes the same.
		again, err := AppendFrame(nil, c)
		if err != nil {
			return // e.g. a JSON remark that is not valid UTF-8 is re-encoded lossily; nothing to compare
		}
		d, err := DecodeFrame(again[4:])
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if d.Code != c.Code || d.Opaque != c.Opaque || d.Flag != c.Flag || !bytes.Equal(d.Body, c.Body) || len(d.ExtFields) != len(c.ExtFields) {
			t.Fatalf("decoded %+v, re-decoded %+v", c, d)
		}
	})
}
