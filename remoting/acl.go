package remoting

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// The request fields of RocketMQ's ACL (the plain access validator): a
// client with credentials puts its access key and a signature of the
// request in every request's extension fields.
const (
	FieldAccessKey     = "AccessKey"
	FieldSignature     = "Signature"
	FieldSecurityToken = "SecurityToken"
)

// ErrNoPermission is a request an ACL refused: no access key, one it does
// not know, or a signature that is not the request's.
var ErrNoPermission = errors.New("no permission")

// ACL authenticates requests by RocketMQ's signature: base64 of the
// HMAC-SHA1, keyed with the client's secret key, of the values of the
// request's extension fields sorted by name (the access key among them,
// the signature and a security token not), followed by the body. It
// authenticates the client; it does not authorize by topic or group
// (every known key may do everything), and it signs neither the request
// code nor the opaque, as RocketMQ does not.
type ACL struct {
	secrets map[string][]byte // access key → secret key
}

// ParseACL reads an ACL: one "ACCESS_KEY SECRET_KEY" pair per line (blank
// lines and lines starting with # are skipped). An error names the line.
func ParseACL(r io.Reader) (*ACL, error) {
	a := &ACL{secrets: map[string][]byte{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("acl line %d: want ACCESS_KEY SECRET_KEY, got %d fields", n, len(f))
		}
		if _, dup := a.secrets[f[0]]; dup {
			return nil, fmt.Errorf("acl line %d: access key %q given twice", n, f[0])
		}
		if len(f[1]) < 8 {
			return nil, fmt.Errorf("acl line %d: the secret key of %q has %d characters, fewer than 8", n, f[0], len(f[1]))
		}
		a.secrets[f[0]] = []byte(f[1])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	if len(a.secrets) == 0 {
		return nil, errors.New("acl: no access key")
	}
	return a, nil
}

// LoadACL reads the ACL file at path (ParseACL).
func LoadACL(path string) (*ACL, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a, err := ParseACL(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// Single returns the ACL's one pair as credentials (a client's file); an
// error when it holds more than one.
func (a *ACL) Single() (*Credentials, error) {
	if len(a.secrets) != 1 {
		return nil, fmt.Errorf("acl: %d access keys, want one (the credentials this side signs with)", len(a.secrets))
	}
	for k, v := range a.secrets {
		return &Credentials{AccessKey: k, SecretKey: v}, nil
	}
	panic("unreachable")
}

// Verify checks req's signature; the error wraps ErrNoPermission.
func (a *ACL) Verify(req *Command) error {
	ak, ok := req.ExtFields[FieldAccessKey]
	if !ok || ak == "" {
		return fmt.Errorf("%w: the request carries no %s (a client needs credentials)", ErrNoPermission, FieldAccessKey)
	}
	secret, ok := a.secrets[ak]
	if !ok {
		return fmt.Errorf("%w: unknown access key %q", ErrNoPermission, ak)
	}
	got, err := base64.StdEncoding.DecodeString(req.ExtFields[FieldSignature])
	if err != nil || len(got) == 0 {
		return fmt.Errorf("%w: access key %q: the request carries no valid %s", ErrNoPermission, ak, FieldSignature)
	}
	if !hmac.Equal(got, Signature(req, secret)) {
		return fmt.Errorf("%w: access key %q: the signature does not match the request", ErrNoPermission, ak)
	}
	return nil
}

// Signature is the HMAC-SHA1 of req's signed content (see ACL) with secret.
func Signature(req *Command, secret []byte) []byte {
	names := make([]string, 0, len(req.ExtFields))
	for k := range req.ExtFields {
		if k != FieldSignature && k != FieldSecurityToken {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	mac := hmac.New(sha1.New, secret)
	for _, k := range names {
		io.WriteString(mac, req.ExtFields[k])
	}
	mac.Write(req.Body)
	return mac.Sum(nil)
}

// Sign puts accessKey and the request's signature with secret into req's
// extension fields, as a RocketMQ client with credentials does.
func Sign(req *Command, accessKey string, secret []byte) {
	if req.ExtFields == nil {
		req.ExtFields = map[string]string{}
	}
	delete(req.ExtFields, FieldSignature)
	req.ExtFields[FieldAccessKey] = accessKey
	req.ExtFields[FieldSignature] = base64.StdEncoding.EncodeToString(Signature(req, secret))
}

// authenticated answers a request the ACL refuses with NO_PERMISSION and
// passes the others to h.
type authenticated struct {
	h   Handler
	acl *ACL
}

func (a authenticated) ServeRemoting(ctx context.Context, c *Conn, req *Command) *Command {
	if err := a.acl.Verify(req); err != nil {
		c.opts.Logger.Warn("remoting: request refused", "from", c.RemoteAddr().String(), "code", req.Code, "err", err)
		return NewResponse(req, NoPermission, err.Error())
	}
	return a.h.ServeRemoting(ctx, c, req)
}
