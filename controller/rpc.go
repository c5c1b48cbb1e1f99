package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mqstore/mqstore/remoting"
)

// Request codes: RocketMQ's controller request codes where it has one for
// the call. Bodies are this package's JSON, not RocketMQ's headers.
const (
	CodeBrokerHeartbeat   int16 = 904  // BROKER_HEARTBEAT
	CodeAlterSyncStateSet int16 = 1001 // CONTROLLER_ALTER_SYNC_STATE_SET
	CodeElectMaster       int16 = 1002 // CONTROLLER_ELECT_MASTER (admin)
	CodeRegisterBroker    int16 = 1003 // CONTROLLER_REGISTER_BROKER
	CodeGetReplicaInfo    int16 = 1004 // CONTROLLER_GET_REPLICA_INFO
	CodeGetMetadataInfo   int16 = 1005 // CONTROLLER_GET_METADATA_INFO (the cluster status)
	CodeGetSyncStateData  int16 = 1006 // CONTROLLER_GET_SYNC_STATE_DATA
	CodeUpdateConfig      int16 = 1009 // UPDATE_CONTROLLER_CONFIG (a set's config)
	CodeCleanBrokerData   int16 = 1011 // CLEAN_BROKER_DATA (remove a replica)
)

// Response codes (RocketMQ's ResponseCode, 2000-2016).
const (
	CodeFencedMasterEpoch       int16 = 2000
	CodeFencedSyncStateSetEpoch int16 = 2001
	CodeInvalidMaster           int16 = 2002
	CodeInvalidReplicas         int16 = 2003
	CodeMasterNotAvailable      int16 = 2004
	CodeInvalidRequest          int16 = 2005
	CodeBrokerNotAlive          int16 = 2006
	CodeNotLeader               int16 = 2007
	CodeBrokerMetadataNotExist  int16 = 2008
	CodeMasterStillExist        int16 = 2011
	CodeElectMasterFailed       int16 = 2012
	CodeAlterSyncStateSetFailed int16 = 2013
	CodeBrokerIDInvalid         int16 = 2014
)

var errCodes = []struct {
	err  error
	code int16
}{
	{ErrFencedMasterEpoch, CodeFencedMasterEpoch},
	{ErrFencedSyncStateSetEpoch, CodeFencedSyncStateSetEpoch},
	{ErrInvalidMaster, CodeInvalidMaster},
	{ErrInvalidReplicas, CodeInvalidReplicas},
	{ErrMasterNotAvailable, CodeMasterNotAvailable},
	{ErrInvalidRequest, CodeInvalidRequest},
	{ErrBrokerNotAlive, CodeBrokerNotAlive},
	{ErrNotLeader, CodeNotLeader},
	{ErrBrokerSetNotExist, CodeBrokerMetadataNotExist},
	{ErrMasterStillExist, CodeMasterStillExist},
	{ErrElectMasterFailed, CodeElectMasterFailed},
	{ErrAlterSyncStateSetFailed, CodeAlterSyncStateSetFailed},
	{ErrBrokerIDInvalid, CodeBrokerIDInvalid},
}

const (
	extLeaderID   = "leaderId"
	extLeaderAddr = "leaderAddress"
)

func errorResponse(req *remoting.Command, err error) *remoting.Command {
	code := remoting.SystemError
	for _, e := range errCodes {
		if errors.Is(err, e.err) {
			code = e.code
			break
		}
	}
	resp := remoting.NewResponse(req, code, err.Error())
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		resp.Set(extLeaderID, nl.LeaderID)
		resp.Set(extLeaderAddr, nl.LeaderAddr)
	}
	return resp
}

type setRequest struct {
	Set string `json:"set"`
	ID  int64  `json:"id,omitempty"`
}

type configRequest struct {
	Set    string    `json:"set"`
	Config SetConfig `json:"config"`
}

func (c *Controller) handler() remoting.Handler {
	return remoting.HandlerFunc(func(ctx context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
		ctx, cancel := context.WithTimeout(ctx, DefaultApplyTimeout)
		defer cancel()
		out, err := c.serve(ctx, req)
		if err != nil {
			return errorResponse(req, err)
		}
		resp := remoting.NewResponse(req, remoting.Success, "")
		if out != nil {
			resp.Body = mustJSON(out)
		}
		return resp
	})
}

func decodeBody(req *remoting.Command, v any) error {
	if err := json.Unmarshal(req.Body, v); err != nil {
		return fmt.Errorf("request code %d: body is not the expected JSON: %v: %w", req.Code, err, ErrInvalidRequest)
	}
	return nil
}

func (c *Controller) serve(ctx context.Context, req *remoting.Command) (any, error) {
	switch req.Code {
	case CodeBrokerHeartbeat:
		var hb Heartbeat
		if err := decodeBody(req, &hb); err != nil {
			return nil, err
		}
		return c.Heartbeat(ctx, hb)
	case CodeRegisterBroker:
		var r RegisterRequest
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.Register(ctx, r)
	case CodeGetReplicaInfo, CodeGetSyncStateData:
		var r setRequest
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.ReplicaInfo(ctx, r.Set)
	case CodeAlterSyncStateSet:
		var r AlterSyncStateSetCmd
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.AlterSyncStateSet(ctx, r)
	case CodeElectMaster:
		var r ElectRequest
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.ElectMaster(ctx, r)
	case CodeCleanBrokerData:
		var r setRequest
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.RemoveBroker(ctx, r.Set, r.ID)
	case CodeUpdateConfig:
		var r configRequest
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.SetConfig(ctx, r.Set, r.Config)
	case CodeGetMetadataInfo:
		return c.Status(ctx)
	}
	return nil, fmt.Errorf("request code %d is not a controller request: %w", req.Code, ErrInvalidRequest)
}

// RemoteError is a controller's refusal as a client receives it:
// errors.Is matches the sentinel of its code (ErrFencedMasterEpoch, …).
type RemoteError struct {
	Code   int16
	Remark string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("controller answered %d: %s", e.Code, e.Remark)
}

// Is matches the sentinel error of the code.
func (e *RemoteError) Is(target error) bool {
	for _, ec := range errCodes {
		if ec.code == e.Code {
			return ec.err == target
		}
	}
	return false
}

// DefaultAttemptTimeout bounds one controller's answer to a call.
const DefaultAttemptTimeout = 2 * time.Second

// ClientOptions configure a Client.
type ClientOptions struct {
	Conn remoting.ConnOptions
	// AttemptTimeout bounds one controller's answer (DefaultAttemptTimeout):
	// a controller that accepts and does not answer (stopped, overloaded)
	// loses its turn and the call goes on to the next.
	AttemptTimeout time.Duration
}

// Client calls the controller group: it sends each call to the leader it
// knows, follows "not leader" answers to the leader they name, tries the
// other controllers on connection errors, and retries with a short backoff
// until its context ends while no leader answers. A refusal (a stale epoch,
// an unknown broker) is returned at once. A call whose connection failed
// after it was sent is sent again to the next controller: the commands are
// compare-and-sets (a second alter with the same epochs is refused as
// stale), so re-read the set after an error.
type Client struct {
	addrs []string
	opts  ClientOptions

	mu    sync.Mutex
	conns map[string]*remoting.Conn
	// leader is the configured address that answered last (tried first);
	// answered is the address that answered last, configured or a hint.
	leader, answered string
	closed           bool
}

// NewClient returns a client of the controllers at addrs (RPC addresses).
func NewClient(addrs []string, opts ClientOptions) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("controller client: no controller addresses")
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = DefaultAttemptTimeout
	}
	return &Client{addrs: slices.Clone(addrs), opts: opts, conns: map[string]*remoting.Conn{}}, nil
}

// Close closes the client's connections.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for a, conn := range c.conns {
		conn.Close()
		delete(c.conns, a)
	}
	return nil
}

// Leader returns the address of the controller that answered last.
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered
}

func (c *Client) conn(ctx context.Context, addr string) (*remoting.Conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("controller client: %w", remoting.ErrClosed)
	}
	if conn := c.conns[addr]; conn != nil && conn.Err() == nil {
		c.mu.Unlock()
		return conn, nil
	}
	c.mu.Unlock()
	conn, err := remoting.Dial(ctx, addr, nil, c.opts.Conn)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.conns[addr]; old != nil && old.Err() == nil {
		conn.Close()
		return old, nil
	}
	c.conns[addr] = conn
	return conn, nil
}

func (c *Client) drop(addr string, conn *remoting.Conn) {
	c.mu.Lock()
	if c.conns[addr] == conn {
		delete(c.conns, addr)
	}
	c.mu.Unlock()
	conn.Close()
}

// call sends code with body to the leader and decodes the answer into out.
func (c *Client) call(ctx context.Context, code int16, body, out any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("controller call %d: %w", code, err)
	}
	payload := mustJSON(body)
	backoff := 20 * time.Millisecond
	var lastErr error
	for {
		// The client's own addresses, the one that led last first (it
		// keeps no other).
		c.mu.Lock()
		order := slices.Clone(c.addrs)
		if i := slices.Index(order, c.leader); i > 0 {
			order = append(append([]string{c.leader}, order[:i]...), order[i+1:]...)
		}
		c.mu.Unlock()
		hinted := map[string]bool{}
		var outside []string
		for len(order) > 0 || len(outside) > 0 {
			if len(order) == 0 {
				order, outside = outside, nil
			}
			addr := order[0]
			order = order[1:]
			resp, err := c.attempt(ctx, addr, code, payload)
			if err != nil {
				lastErr = err
				c.mu.Lock()
				if c.leader == addr {
					c.leader = ""
				}
				c.mu.Unlock()
				if ctx.Err() != nil {
					return fmt.Errorf("controller call %d: no leader answered (%w): %w", code, lastErr, ctx.Err())
				}
				continue
			}
			switch resp.Code {
			case remoting.Success:
				c.mu.Lock()
				c.leader, c.answered = "", addr
				if slices.Contains(c.addrs, addr) {
					c.leader = addr // an outside hint is asked again next time, not kept
				}
				c.mu.Unlock()
				if out != nil {
					if err := json.Unmarshal(resp.Body, out); err != nil {
						return fmt.Errorf("controller call %d to %s: answer is not the expected JSON: %w", code, addr, err)
					}
				}
				return nil
			case CodeNotLeader:
				lastErr = &NotLeaderError{LeaderID: resp.Field(extLeaderID), LeaderAddr: resp.Field(extLeaderAddr)}
				order, outside = c.followHint(resp.Field(extLeaderAddr), addr, hinted, order, outside)
				continue
			default:
				return fmt.Errorf("controller call %d to %s: %w", code, addr, &RemoteError{Code: resp.Code, Remark: resp.Remark})
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("controller call %d: no leader answered (%w): %w", code, lastErr, ctx.Err())
		case <-t.C:
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// followHint puts a follower's leader hint among the addresses still to
// try: one of the client's own next, one outside them (the leader's own
// listen address, which a proxy or a translated address may stand for)
// after all of its own.
func (c *Client) followHint(hint, from string, hinted map[string]bool, order, outside []string) ([]string, []string) {
	if hint == "" || hint == from || hinted[hint] {
		return order, outside
	}
	hinted[hint] = true
	if slices.Contains(c.addrs, hint) {
		return append([]string{hint}, slices.DeleteFunc(order, func(a string) bool { return a == hint })...), outside
	}
	return order, append(outside, hint)
}

// attempt sends one request to addr and waits at most AttemptTimeout.
func (c *Client) attempt(ctx context.Context, addr string, code int16, payload []byte) (*remoting.Command, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout)
	defer cancel()
	conn, err := c.conn(ctx, addr)
	if err != nil {
		return nil, err
	}
	resp, err := conn.Invoke(ctx, remoting.NewRequest(code, nil, payload))
	if err != nil {
		// A controller that does not answer (stopped, cut off) may keep
		// the connection open: drop it, the next call dials afresh.
		c.drop(addr, conn)
		return nil, err
	}
	return resp, nil
}

// Register registers a broker and returns its replica record (its id).
func (c *Client) Register(ctx context.Context, req RegisterRequest) (*Replica, error) {
	var r Replica
	if err := c.call(ctx, CodeRegisterBroker, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Heartbeat reports a broker's liveness and progress to the leader and
// returns its set's state (master, epochs, in-sync set).
func (c *Client) Heartbeat(ctx context.Context, hb Heartbeat) (*BrokerSet, error) {
	var b BrokerSet
	if err := c.call(ctx, CodeBrokerHeartbeat, hb, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// ReplicaInfo returns a set's replicated state: master, epochs, in-sync set.
func (c *Client) ReplicaInfo(ctx context.Context, set string) (*BrokerSet, error) {
	var b BrokerSet
	if err := c.call(ctx, CodeGetReplicaInfo, setRequest{Set: set}, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// AlterSyncStateSet proposes the master's new in-sync set.
func (c *Client) AlterSyncStateSet(ctx context.Context, cmd AlterSyncStateSetCmd) (*BrokerSet, error) {
	var b BrokerSet
	if err := c.call(ctx, CodeAlterSyncStateSet, cmd, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// ElectMaster runs an operator's election.
func (c *Client) ElectMaster(ctx context.Context, req ElectRequest) (*BrokerSet, error) {
	var b BrokerSet
	if err := c.call(ctx, CodeElectMaster, req, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// RemoveBroker drops a replica that is not the master.
func (c *Client) RemoveBroker(ctx context.Context, set string, id int64) (*BrokerSet, error) {
	var b BrokerSet
	if err := c.call(ctx, CodeCleanBrokerData, setRequest{Set: set, ID: id}, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// SetConfig replaces a set's configuration.
func (c *Client) SetConfig(ctx context.Context, set string, cfg SetConfig) (*BrokerSet, error) {
	var b BrokerSet
	if err := c.call(ctx, CodeUpdateConfig, configRequest{Set: set, Config: cfg}, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// Status returns every set with the leader's liveness view.
func (c *Client) Status(ctx context.Context) (*ClusterStatus, error) {
	var s ClusterStatus
	if err := c.call(ctx, CodeGetMetadataInfo, struct{}{}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
