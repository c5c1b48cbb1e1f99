// Package namesrv is a RocketMQ name server: brokers register their
// address, role and topics; clients ask for a topic's route (which brokers
// serve it, master and slaves, and how many queues). A broker that stops
// registering, or whose registering connection closes, leaves the routes.
//
// The route JSON is compact standard JSON, the one form every RocketMQ
// client parses (rocketmq-client-go splits brokerAddrs by hand: a space
// after a comma would break it).
package namesrv

import "encoding/json"

// Permission bits of a topic's queues (RocketMQ's PermName).
const (
	PermInherit = 1
	PermWrite   = 2
	PermRead    = 4
)

// MasterID is the broker id of a master; a slave's is above it.
const MasterID = 0

// TopicRouteData is the GET_ROUTEINFO_BY_TOPIC body.
type TopicRouteData struct {
	OrderTopicConf    string              `json:"orderTopicConf"`
	QueueDatas        []QueueData         `json:"queueDatas"`
	BrokerDatas       []BrokerData        `json:"brokerDatas"`
	FilterServerTable map[string][]string `json:"filterServerTable"`
}

// QueueData is one broker group's queues of a topic.
type QueueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int    `json:"readQueueNums"`
	WriteQueueNums int    `json:"writeQueueNums"`
	Perm           int    `json:"perm"`
	TopicSysFlag   int    `json:"topicSysFlag"`
}

// BrokerData is one broker group: its addresses by broker id (0 = master).
type BrokerData struct {
	Cluster     string           `json:"cluster"`
	BrokerName  string           `json:"brokerName"`
	BrokerAddrs map[int64]string `json:"brokerAddrs"`
}

// TopicConfig is a broker's configuration of one topic.
type TopicConfig struct {
	TopicName      string `json:"topicName"`
	ReadQueueNums  int    `json:"readQueueNums"`
	WriteQueueNums int    `json:"writeQueueNums"`
	Perm           int    `json:"perm"`
	TopicSysFlag   int    `json:"topicSysFlag"`
	Order          bool   `json:"order"`
}

// RegisterBrokerBody is the REGISTER_BROKER body: the broker's topics (the
// shape of RocketMQ's, without its data version and filter servers).
type RegisterBrokerBody struct {
	TopicConfigSerializeWrapper TopicConfigWrapper `json:"topicConfigSerializeWrapper"`
}

// TopicConfigWrapper holds a broker's topic table.
type TopicConfigWrapper struct {
	TopicConfigTable map[string]TopicConfig `json:"topicConfigTable"`
}

// ClusterInfo is the GET_BROKER_CLUSTER_INFO body.
type ClusterInfo struct {
	BrokerAddrTable  map[string]BrokerData `json:"brokerAddrTable"`
	ClusterAddrTable map[string][]string   `json:"clusterAddrTable"`
}

// TopicList is the GET_ALL_TOPIC_LIST_FROM_NAMESERVER body.
type TopicList struct {
	TopicList []string `json:"topicList"`
}

// encode marshals v as compact JSON; the types above cannot fail.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("namesrv: encode " + err.Error())
	}
	return b
}
