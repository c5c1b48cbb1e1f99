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
	"github.com/mqstore/mqstore/interop/internal/clientflags"
)

func main() {
	cl := clientflags.Register(flag.CommandLine, "sendonce")
	topic := flag.String("topic", "", "topic")
	body := flag.String("body", "", "the message body")
	flag.Parse()
	rlog.SetLogLevel("fatal")
	opts := []producer.Option{producer.WithNsResolver(cl.Resolver()),
		producer.WithInstanceName(cl.Instance), producer.WithGroupName("sendonce"), producer.WithRetry(0)}
	if cl.TLS {
		opts = append(opts, producer.WithTls(true))
	}
	if cred, ok := cl.Credentials(); ok {
		opts = append(opts, producer.WithCredentials(cred))
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
