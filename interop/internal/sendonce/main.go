// Command sendonce sends one message with rocketmq-client-go's producer
// and prints
//
//	SENT <msgId> <offsetMsgId>
//
// or the error, exiting 1. The interop tests run it as a process where the
// client's options would reach other clients: its WithTls sets a
// process-wide default.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func main() {
	ns := flag.String("namesrv", "127.0.0.1:9876", "name server")
	topic := flag.String("topic", "", "topic")
	body := flag.String("body", "", "the message body")
	instance := flag.String("instance", "sendonce", "client instance name")
	useTLS := flag.Bool("tls", false, "speak TLS to the name server and the brokers")
	accessKey := flag.String("access-key", "", "ACL credentials: the access key")
	secretKey := flag.String("secret-key", "", "ACL credentials: the secret key")
	flag.Parse()
	rlog.SetLogLevel("fatal")
	opts := []producer.Option{producer.WithNsResolver(primitive.NewPassthroughResolver([]string{*ns})),
		producer.WithInstanceName(*instance), producer.WithGroupName("sendonce"), producer.WithRetry(0)}
	if *useTLS {
		opts = append(opts, producer.WithTls(true))
	}
	if *accessKey != "" {
		opts = append(opts, producer.WithCredentials(primitive.Credentials{AccessKey: *accessKey, SecretKey: *secretKey}))
	}
	p, err := rocketmq.NewProducer(opts...)
	if err == nil {
		err = p.Start()
	}
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.SendSync(ctx, primitive.NewMessage(*topic, []byte(*body)))
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	if res.Status != primitive.SendOK {
		fmt.Println("ERROR status", res.Status)
		os.Exit(1)
	}
	fmt.Println("SENT", res.MsgID, res.OffsetMsgID)
	if err := p.Shutdown(); err != nil {
		fmt.Println("ERROR shutdown", err)
		os.Exit(1)
	}
}
