package remoting

// Request codes (RocketMQ's RequestCode) this project serves or sends.
const (
	SendMessage                int16 = 10
	PullMessage                int16 = 11
	QueryMessage               int16 = 12
	QueryConsumerOffset        int16 = 14
	UpdateConsumerOffset       int16 = 15
	UpdateAndCreateTopic       int16 = 17
	GetAllTopicConfig          int16 = 21
	SearchOffsetByTimestamp    int16 = 29
	GetMaxOffset               int16 = 30
	GetMinOffset               int16 = 31
	ViewMessageByID            int16 = 33
	HeartBeat                  int16 = 34
	UnregisterClient           int16 = 35
	ConsumerSendMsgBack        int16 = 36
	GetConsumerListByGroup     int16 = 38
	NotifyConsumerIDsChanged   int16 = 40
	LockBatchMQ                int16 = 41
	UnlockBatchMQ              int16 = 42
	GetAllConsumerOffset       int16 = 43
	RegisterBroker             int16 = 103
	UnregisterBroker           int16 = 104
	GetRouteInfoByTopic        int16 = 105
	GetBrokerClusterInfo       int16 = 106
	GetAllTopicListFromNameSrv int16 = 206
	SendMessageV2              int16 = 310
	SendBatchMessage           int16 = 320
)

// Response codes (RocketMQ's ResponseCode and RemotingSysResponseCode).
const (
	Success                 int16 = 0
	SystemError             int16 = 1
	SystemBusy              int16 = 2
	RequestCodeNotSupported int16 = 3
	FlushDiskTimeout        int16 = 10
	SlaveNotAvailable       int16 = 11
	FlushSlaveTimeout       int16 = 12
	MessageIllegal          int16 = 13
	ServiceNotAvailable     int16 = 14
	NoPermission            int16 = 16
	TopicNotExist           int16 = 17
	PullNotFound            int16 = 19
	PullRetryImmediately    int16 = 20
	PullOffsetMoved         int16 = 21
	QueryNotFound           int16 = 22
	SubscriptionNotExist    int16 = 24
)
