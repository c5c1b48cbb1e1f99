package broker

import (
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/mqstore/mqstore/remoting"
)

// heartbeat is the HEART_BEAT body.
type heartbeat struct {
	ClientID        string         `json:"clientID"`
	ProducerDataSet []producerData `json:"producerDataSet"`
	ConsumerDataSet []consumerData `json:"consumerDataSet"`
}

type producerData struct {
	GroupName string `json:"groupName"`
}

type consumerData struct {
	GroupName           string             `json:"groupName"`
	ConsumeType         string             `json:"consumeType"`
	MessageModel        string             `json:"messageModel"`
	ConsumeFromWhere    string             `json:"consumeFromWhere"`
	SubscriptionDataSet []subscriptionData `json:"subscriptionDataSet"`
}

type subscriptionData struct {
	Topic          string `json:"topic"`
	SubString      string `json:"subString"`
	ExpressionType string `json:"expressionType"`
}

// client is one client process (a client id) on one connection.
type client struct {
	conn     *remoting.Conn
	lastSeen time.Time
}

type consumerGroup struct {
	clients map[string]*client          // by client id
	subs    map[string]subscriptionData // by topic, the latest heartbeat's
	model   string
}

// registry holds the producers and consumers that heartbeat this broker.
// A client leaves when its connection closes (the Go client never
// unregisters) or it falls silent past the expiry.
type registry struct {
	mu        sync.Mutex
	consumers map[string]*consumerGroup
	producers map[string]map[string]*client
}

func newRegistry() *registry {
	return &registry{consumers: map[string]*consumerGroup{}, producers: map[string]map[string]*client{}}
}

// heartbeat records hb from conn; it returns the consumer groups whose
// membership changed and those new to this broker.
func (r *registry) heartbeat(conn *remoting.Conn, hb *heartbeat, now time.Time) (changed []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range hb.ProducerDataSet {
		g := r.producers[p.GroupName]
		if g == nil {
			g = map[string]*client{}
			r.producers[p.GroupName] = g
		}
		g[hb.ClientID] = &client{conn: conn, lastSeen: now}
	}
	for _, cd := range hb.ConsumerDataSet {
		g := r.consumers[cd.GroupName]
		if g == nil {
			g = &consumerGroup{clients: map[string]*client{}, subs: map[string]subscriptionData{}}
			r.consumers[cd.GroupName] = g
		}
		old, ok := g.clients[hb.ClientID]
		if !ok || old.conn != conn {
			changed = append(changed, cd.GroupName)
		}
		g.clients[hb.ClientID] = &client{conn: conn, lastSeen: now}
		g.model = cd.MessageModel
		subs := map[string]subscriptionData{}
		for _, s := range cd.SubscriptionDataSet {
			subs[s.Topic] = s
		}
		g.subs = subs
	}
	return changed
}

// unregister drops a client from the named groups.
func (r *registry) unregister(clientID, producerGroup, consumerGroup string) (changed []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.producers[producerGroup]; g != nil {
		delete(g, clientID)
	}
	if g := r.consumers[consumerGroup]; g != nil {
		if _, ok := g.clients[clientID]; ok {
			delete(g.clients, clientID)
			changed = append(changed, consumerGroup)
		}
	}
	return changed
}

// drop removes every client on conn (closed), or, with conn nil, every
// client silent since before cutoff.
func (r *registry) drop(conn *remoting.Conn, cutoff time.Time) (changed []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gone := func(c *client) bool {
		if conn != nil {
			return c.conn == conn
		}
		return c.lastSeen.Before(cutoff)
	}
	for _, g := range r.producers {
		for id, c := range g {
			if gone(c) {
				delete(g, id)
			}
		}
	}
	for name, g := range r.consumers {
		for id, c := range g.clients {
			if gone(c) {
				delete(g.clients, id)
				if !slices.Contains(changed, name) {
					changed = append(changed, name)
				}
			}
		}
	}
	return changed
}

// members lists a consumer group's client ids, sorted.
func (r *registry) members(group string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.consumers[group]
	if g == nil {
		return nil
	}
	ids := make([]string, 0, len(g.clients))
	for id := range g.clients {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// conns lists the connections of a consumer group's clients.
func (r *registry) conns(group string) []*remoting.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.consumers[group]
	if g == nil {
		return nil
	}
	out := make([]*remoting.Conn, 0, len(g.clients))
	for _, c := range g.clients {
		out = append(out, c.conn)
	}
	return out
}

// subscription returns a group's subscription of a topic from its
// heartbeats.
func (r *registry) subscription(group, topic string) (subscriptionData, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.consumers[group]
	if g == nil {
		return subscriptionData{}, false
	}
	s, ok := g.subs[topic]
	return s, ok
}

func decodeHeartbeat(body []byte) (*heartbeat, error) {
	var hb heartbeat
	if err := json.Unmarshal(body, &hb); err != nil {
		return nil, err
	}
	return &hb, nil
}
