// Package clientflags holds the command-line flags the interop commands'
// rocketmq-client-go clients share: where the name server is, the client
// instance's name, TLS, and ACL credentials.
package clientflags

import (
	"flag"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// Client is what the flags set.
type Client struct {
	NameServer string
	Instance   string
	TLS        bool
	AccessKey  string
	SecretKey  string
}

// Register defines the flags on fs, the instance name defaulting to
// instance, and returns where they are parsed into.
func Register(fs *flag.FlagSet, instance string) *Client {
	c := &Client{}
	fs.StringVar(&c.NameServer, "namesrv", "127.0.0.1:9876", "name server")
	fs.StringVar(&c.Instance, "instance", instance, "client instance name")
	fs.BoolVar(&c.TLS, "tls", false, "speak TLS to the name server and the brokers")
	fs.StringVar(&c.AccessKey, "access-key", "", "ACL credentials: the access key")
	fs.StringVar(&c.SecretKey, "secret-key", "", "ACL credentials: the secret key")
	return c
}

// Resolver is the name server resolver of the client's options.
func (c *Client) Resolver() primitive.NsResolver {
	return primitive.NewPassthroughResolver([]string{c.NameServer})
}

// Credentials are the ACL credentials, and whether any were given.
func (c *Client) Credentials() (primitive.Credentials, bool) {
	return primitive.Credentials{AccessKey: c.AccessKey, SecretKey: c.SecretKey}, c.AccessKey != ""
}
