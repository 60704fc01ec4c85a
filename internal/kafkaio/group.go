package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The consumer group protocol. kafka-go's ConsumerGroup holds one coordinator connection per
// generation, rebalances eagerly, knows no static membership (KIP-345) and commits no leader
// epoch (KIP-320). GroupMember speaks the classic group protocol itself instead: JoinGroup,
// SyncGroup, Heartbeat, LeaveGroup, OffsetFetch and OffsetCommit, exchanged raw (kmsg) through
// kafka-go's Transport, whose pooled connections re-authenticate (Conn.dial) and which routes
// every request to the group's current coordinator (FindCoordinator before each one, so a
// coordinator that moved is found again at the next attempt). The members' metadata and
// assignments use the standard consumer protocol encoding, so a group can mix GroupMembers with
// kafka-go ConsumerGroups that list the same balancers (during a rolling upgrade).

// Version ranges of the group requests. The minimums are the first versions with what
// GroupMember needs: JoinGroup v5, SyncGroup v3, Heartbeat v3 and LeaveGroup v3 carry the
// group instance id (static membership); OffsetCommit v6 carries the committed leader epoch and
// OffsetFetch v5 returns it; DescribeGroups v4 names the members' instance ids. The maximums
// are the last versions before the request's layout changed in ways GroupMember does not use
// (OffsetFetch v8 batches groups; OffsetCommit v9 is the next-generation protocol's).
const (
	minJoinVersion, maxJoinVersion                 = 5, 9
	minSyncVersion, maxSyncVersion                 = 3, 5
	minHeartbeatVersion, maxHeartbeatVersion       = 3, 4
	minLeaveVersion, maxLeaveVersion               = 3, 5
	minOffsetCommitVersion, maxOffsetCommitVersion = 6, 8
	minOffsetFetchVersion, maxOffsetFetchVersion   = 5, 7
	minDescribeVersion, maxDescribeVersion         = 4, 5
)

// consumerProtocolType is the protocol type of consumer groups (the Java client's, kafka-go's).
const consumerProtocolType = "consumer"

// ErrGroupFenced is wrapped by the error of a GroupMember whose static membership was taken by
// another process with the same group instance id (FENCED_INSTANCE_ID). It is fatal: two
// processes configured with one instance id would fence each other in turns.
var ErrGroupFenced = errors.New("kafkaio: another member joined the consumer group with this group instance id")

// GroupConfig configures a GroupMember.
type GroupConfig struct {
	// Group is the consumer group ID. Required.
	Group string
	// Topic is the one topic the member subscribes to. Required.
	Topic string
	// InstanceID, when not empty, makes the member static (KIP-345): a member that rejoins with
	// the same instance id within SessionTimeout gets its partitions back without a rebalance,
	// and a static member that stops does not leave the group (its partitions move once its
	// session expired). Empty: a dynamic member, which leaves the group when it stops.
	InstanceID string
	// SessionTimeout, RebalanceTimeout: the member's session and how long the coordinator waits
	// for the members to rejoin during a rebalance. Required.
	SessionTimeout, RebalanceTimeout time.Duration
	// Sticky, when not nil, is the preferred assignment strategy; range, which every kdedup
	// version supports, follows it, so that a group mixing versions during a rolling upgrade
	// agrees on one. The group uses the first strategy every member lists; the leader assigns
	// with it. Default (nil): range alone.
	Sticky *StickyBalancer
	// Cooperative, when set, lists CooperativeProtocol (KIP-429) before the others: when every
	// member lists it, the group chooses it, and the member keeps the partitions it owns through
	// a rebalance (the caller revokes only those the next generation does not give it back; see
	// Generation.Cooperative and Own). A group with one member that does not list it (a rolling
	// upgrade) agrees on the next eager protocol instead, and every member then rebalances
	// eagerly. Default: eager protocols alone.
	Cooperative bool
	// Backoff paces the retries of a request whose coordinator moved or is loading (see
	// coordinatorRetry). Default: the zero Backoff's.
	Backoff Backoff
}

// coordinatorAttempts bounds the attempts of one request at a coordinator that moved or is
// loading: about 11 s with the default Backoff, after which the caller retries under its policy.
const coordinatorAttempts = 8

// coordinatorMoved reports whether err says the request reached no coordinator of the group:
// the coordinator moved (NOT_COORDINATOR), is not available yet (COORDINATOR_NOT_AVAILABLE:
// the offsets topic is being created, or its partition has no leader) or is loading the
// group's state (COORDINATOR_LOAD_IN_PROGRESS). kafka-go's Transport looks the coordinator up
// again for every request, so the request is retried as it is.
func coordinatorMoved(err error) bool {
	return errors.Is(err, kafka.NotCoordinatorForGroup) || errors.Is(err, kafka.GroupCoordinatorNotAvailable) ||
		errors.Is(err, kafka.GroupLoadInProgress)
}

// coordinatorRetry calls op until it returns nil or an error other than a coordinator move
// (coordinatorMoved), at most coordinatorAttempts times, pacing the attempts by the member's
// Backoff; it returns op's last error.
func (m *GroupMember) coordinatorRetry(ctx context.Context, op func() error) error {
	return m.cfg.Backoff.Retry(ctx, coordinatorAttempts, func(int) error {
		err := op()
		if err != nil && !coordinatorMoved(err) {
			return Permanent(err)
		}
		return err
	})
}

// Generation is one generation of a consumer group, as one member sees it.
type Generation struct {
	// ID is the generation id; MemberID the member's id in it.
	ID       int32
	MemberID string
	// Protocol is the balancer the group chose.
	Protocol string
	// Partitions are the member's partitions of the topic, sorted.
	Partitions []int
	// Leader says whether this member assigned the partitions; Count is how many partitions
	// the topic had then (0 for members other than the leader).
	Leader bool
	Count  int
	// Cooperative says that the group chose CooperativeProtocol: the member kept its partitions
	// through the rebalance, must revoke those it owns and Partitions does not list, keeps the
	// others running, and must rejoin at once when it revoked any. Otherwise the rebalance was
	// eager: the member had to give up every partition before it joined.
	Cooperative bool
}

// Committed is a committed offset: the next offset to read and the leader epoch of the record
// before it (-1 when unknown).
type Committed struct {
	Offset      int64
	LeaderEpoch int32
}

// GroupMember is one member of a consumer group, speaking the group protocol through client.
// Join, Heartbeat, Commit, Fetch and Leave are safe for concurrent use; the member id Join
// learns is kept for the next Join.
type GroupMember struct {
	client    *kafka.Client
	cfg       GroupConfig
	balancers []kafka.GroupBalancer // cfg.Sticky, then range

	mu       sync.Mutex
	memberID string
	// owned and ownedGen are the partitions the member owns and the generation it got them in,
	// as Own set them (or adopt found them): the owned partitions of its cooperative subscription.
	owned    []int
	ownedGen int32
	versions map[int16]int16 // negotiated request versions, by API key
	adopted  bool            // a static member asked for its previous incarnation's subscription
}

// NewGroupMember returns a member of cfg.Group that has not joined yet.
func NewGroupMember(client *kafka.Client, cfg GroupConfig) *GroupMember {
	b := []kafka.GroupBalancer{kafka.RangeGroupBalancer{}}
	if cfg.Sticky != nil {
		b = []kafka.GroupBalancer{cfg.Sticky, kafka.RangeGroupBalancer{}}
	}
	if cfg.Cooperative {
		b = append([]kafka.GroupBalancer{cooperativeBalancer{}}, b...)
	}
	m := &GroupMember{client: client, cfg: cfg, balancers: b, versions: map[int16]int16{}, ownedGen: -1}
	if cfg.Cooperative && cfg.Sticky != nil {
		// Both protocols' claims start as the same nothing (generation -1), as every later
		// generation sets them alike: adopt can then rebuild both from the one subscription
		// the coordinator describes, byte for byte.
		cfg.Sticky.SetOwned(m.ownedGen, nil)
	}
	return m
}

// Own records the partitions the member owns, got in generation, for the owned partitions of its
// next cooperative subscription (Join). The caller calls it whenever what it owns changes: after
// each generation's revocations and assignments, and with none once it gave everything up.
func (m *GroupMember) Own(generation int32, partitions []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.owned, m.ownedGen = slices.Clone(partitions), generation
}

// FirstOffset and LastOffset stand for a partition's log start and its end where an offset is
// expected (a partition without committed offset starts at one of them); the input reader
// resolves them.
const (
	FirstOffset = kafka.FirstOffset
	LastOffset  = kafka.LastOffset
)

// ErrRebalanceInProgress is the coordinator's REBALANCE_IN_PROGRESS, as errors.Is sees it in
// Heartbeat's error: the group rebalances and the member must rejoin.
var ErrRebalanceInProgress error = kafka.RebalanceInProgress

// groupExchange is a rawExchange routed to a group's coordinator.
type groupExchange struct {
	rawExchange
	group string
}

// Group implements protocol.GroupMessage: kafka-go's Transport sends the request to the
// coordinator of group.
func (x *groupExchange) Group() string { return x.group }

var _ protocol.GroupMessage = (*groupExchange)(nil)

// send exchanges req with the group's coordinator within timeout, in the highest version in
// [lo, hi] the coordinator serves (asked once, then remembered).
func (m *GroupMember) send(ctx context.Context, req kmsg.Request, lo, hi int16, timeout time.Duration) (kmsg.Response, error) {
	m.mu.Lock()
	v := m.versions[req.Key()]
	m.mu.Unlock()
	x := &groupExchange{group: m.cfg.Group, rawExchange: rawExchange{clientID: clientIDOf(m.client), req: req, min: lo, max: hi, version: v}}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := roundTrip(ctx, m.client, x)
	if err != nil {
		m.mu.Lock()
		delete(m.versions, req.Key()) // asked again next time: the coordinator may have moved to another broker version
		m.mu.Unlock()
		return nil, fmt.Errorf("kafkaio: %s of group %q: %w", kmsg.NameForKey(req.Key()), m.cfg.Group, err)
	}
	m.mu.Lock()
	m.versions[req.Key()] = x.version
	m.mu.Unlock()
	return res, nil
}

// codeErr returns the error of a response error code, nil for 0.
func codeErr(code int16) error {
	if code == 0 {
		return nil
	}
	if kafka.Error(code) == kafka.FencedInstanceID {
		return fmt.Errorf("%w: %w", ErrGroupFenced, kafka.FencedInstanceID)
	}
	return kafka.Error(code)
}

// instanceID returns the configured instance id, nil for a dynamic member.
func (m *GroupMember) instanceID() *string {
	if m.cfg.InstanceID == "" {
		return nil
	}
	return kmsg.StringPtr(m.cfg.InstanceID)
}

// MemberID returns the member id of the last Join, "" before.
func (m *GroupMember) MemberID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.memberID
}

// Join joins the group (JoinGroup, the leader's assignment, SyncGroup) and returns the member's
// generation. It rejoins at once when the coordinator asks for it (MEMBER_ID_REQUIRED,
// REBALANCE_IN_PROGRESS during the sync, UNKNOWN_MEMBER_ID with a fresh id), and returns any
// other failure for the caller to retry under its policy: coordinator moves and loads
// (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS), unreachable
// brokers, authorization failures, and ErrGroupFenced. A balancer with a UserData method (such
// as StickyBalancer) is asked for the member's user data at every join. Before a static
// member's first join, the user data its instance id joined with last (in a previous process)
// is handed to the balancers with an Adopt method (see adopt).
func (m *GroupMember) Join(ctx context.Context) (Generation, error) {
	m.mu.Lock()
	adopt := m.cfg.InstanceID != "" && !m.adopted
	m.adopted = true
	m.mu.Unlock()
	if adopt {
		m.adopt(ctx)
	}
	for attempt := 0; ; attempt++ {
		var gen Generation
		var rejoin bool
		err := m.coordinatorRetry(ctx, func() (err error) {
			gen, rejoin, err = m.joinOnce(ctx)
			return err
		})
		if !rejoin || attempt >= 10 || ctx.Err() != nil {
			return gen, err
		}
	}
}

// adopt reads the group's description and hands the user data with which the member's instance
// id joined last to the balancers with an Adopt([]byte) method (StickyBalancer.Adopt), so that a
// static member restarted in a new process joins with the subscription of its previous
// incarnation: a coordinator that compares subscriptions (kfake compares them byte for byte)
// then sees no change and hands the partitions back without a rebalance. It is best effort: a
// failure is a rebalance, not an error.
func (m *GroupMember) adopt(ctx context.Context) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{m.cfg.Group}
	r, err := m.send(ctx, req, minDescribeVersion, maxDescribeVersion, m.cfg.SessionTimeout)
	if err != nil {
		return
	}
	for _, g := range r.(*kmsg.DescribeGroupsResponse).Groups {
		for _, mem := range g.Members {
			if g.ErrorCode != 0 || mem.InstanceID == nil || *mem.InstanceID != m.cfg.InstanceID {
				continue
			}
			var meta kmsg.ConsumerMemberMetadata
			if meta.ReadFrom(mem.ProtocolMetadata) != nil {
				return
			}
			if g.Protocol == CooperativeProtocol && m.cfg.Cooperative {
				m.adoptOwned(&meta)
			}
			for _, b := range m.balancers {
				if a, ok := b.(interface{ Adopt([]byte) }); ok && b.ProtocolName() == g.Protocol {
					a.Adopt(meta.UserData)
				}
			}
		}
	}
}

// adoptOwned takes over the owned partitions of a previous incarnation's cooperative
// subscription, so that the member's first JoinGroup repeats it (see adopt). Claiming them is
// safe: no other member gets a partition this member claims before it revoked it, and the caller
// starts the partitions it is given, so claimed ones end up either running here or released.
func (m *GroupMember) adoptOwned(meta *kmsg.ConsumerMemberMetadata) {
	var owned []int
	for _, op := range meta.OwnedPartitions {
		if op.Topic == m.cfg.Topic {
			for _, p := range op.Partitions {
				owned = append(owned, int(p))
			}
		}
	}
	gen := int32(-1)
	if meta.Version >= 2 {
		gen = meta.Generation
	}
	m.Own(gen, owned)
	// The eager sticky protocol's claims, which the member's JoinGroup lists too, were the same
	// partitions and generation (the consumer's Worker sets both at every generation): a
	// coordinator that compares every protocol's metadata sees no change either.
	if m.cfg.Sticky != nil {
		m.cfg.Sticky.Adopt(encodeClaims(claims{generation: gen, owned: map[string][]int{m.cfg.Topic: owned}}))
	}
}

// joinOnce is one JoinGroup and SyncGroup; rejoin says that the coordinator asked the member to
// join again at once.
func (m *GroupMember) joinOnce(ctx context.Context) (Generation, bool, error) {
	req, err := m.joinRequest()
	if err != nil {
		return Generation{}, false, err
	}
	// The coordinator holds the JoinGroup until every member joined, up to the rebalance timeout.
	r, err := m.send(ctx, req, minJoinVersion, maxJoinVersion, m.cfg.RebalanceTimeout+m.cfg.SessionTimeout)
	if err != nil {
		return Generation{}, false, err
	}
	res := r.(*kmsg.JoinGroupResponse)
	switch err := codeErr(res.ErrorCode); {
	case errors.Is(err, kafka.MemberIDRequired):
		m.setMemberID(res.MemberID)
		return Generation{}, true, err
	case errors.Is(err, kafka.UnknownMemberId):
		m.setMemberID("")
		return Generation{}, true, err
	case err != nil:
		return Generation{}, false, fmt.Errorf("kafkaio: joining group %q: %w", m.cfg.Group, err)
	}
	m.setMemberID(res.MemberID)
	gen := Generation{ID: res.Generation, MemberID: res.MemberID, Leader: res.LeaderID == res.MemberID}
	if res.Protocol != nil {
		gen.Protocol = *res.Protocol
	}
	gen.Cooperative = gen.Protocol == CooperativeProtocol
	var assignments []kmsg.SyncGroupRequestGroupAssignment
	if gen.Leader && !res.SkipAssignment {
		if assignments, gen.Count, err = m.assign(ctx, gen.Protocol, res.Members); err != nil {
			return Generation{}, false, err
		}
	}
	return m.sync(ctx, gen, assignments)
}

// joinRequest builds the member's JoinGroup: every balancer, with the member's subscription.
func (m *GroupMember) joinRequest() (*kmsg.JoinGroupRequest, error) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.InstanceID = m.cfg.Group, m.MemberID(), m.instanceID()
	req.SessionTimeoutMillis = int32(m.cfg.SessionTimeout.Milliseconds())
	req.RebalanceTimeoutMillis = int32(m.cfg.RebalanceTimeout.Milliseconds())
	req.ProtocolType = consumerProtocolType
	for _, b := range m.balancers {
		var userData []byte
		if u, ok := b.(interface{ UserData() ([]byte, error) }); ok {
			var err error
			if userData, err = u.UserData(); err != nil {
				return nil, fmt.Errorf("kafkaio: user data of balancer %s: %w", b.ProtocolName(), err)
			}
		}
		meta := kmsg.ConsumerMemberMetadata{Topics: []string{m.cfg.Topic}, UserData: userData}
		if b.ProtocolName() == CooperativeProtocol {
			m.mu.Lock()
			meta = coopSubscription(m.cfg.Topic, m.ownedGen, m.owned)
			m.mu.Unlock()
		}
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = b.ProtocolName(), meta.AppendTo(nil)
		req.Protocols = append(req.Protocols, p)
	}
	return req, nil
}

func (m *GroupMember) setMemberID(id string) {
	m.mu.Lock()
	m.memberID = id
	m.mu.Unlock()
}

// assign is the leader's part: it assigns the topic's partitions to members with the balancer
// named protocol, and returns the encoded assignments and the partition count.
func (m *GroupMember) assign(ctx context.Context, name string, members []kmsg.JoinGroupResponseMember) ([]kmsg.SyncGroupRequestGroupAssignment, int, error) {
	i := slices.IndexFunc(m.balancers, func(b kafka.GroupBalancer) bool { return b.ProtocolName() == name })
	if i < 0 {
		return nil, 0, fmt.Errorf("kafkaio: group %q chose balancer %q, which this member does not have", m.cfg.Group, name)
	}
	mctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTimeout)
	defer cancel()
	n, err := PartitionCount(mctx, m.client, m.cfg.Topic)
	if err != nil {
		return nil, 0, err
	}
	gm := make([]kafka.GroupMember, len(members))
	for j, mem := range members {
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(mem.ProtocolMetadata); err != nil {
			return nil, 0, fmt.Errorf("kafkaio: group %q member %s sent metadata that cannot be read: %w", m.cfg.Group, mem.MemberID, err)
		}
		gm[j] = kafka.GroupMember{ID: mem.MemberID, Topics: meta.Topics, UserData: meta.UserData}
		if name == CooperativeProtocol {
			gm[j].UserData = ownedClaims(&meta) // the owned partitions, as the sticky claims
		}
	}
	parts := make([]kafka.Partition, n)
	for p := range parts {
		parts[p] = kafka.Partition{Topic: m.cfg.Topic, ID: p}
	}
	got := m.balancers[i].AssignGroups(gm, parts)
	out := make([]kmsg.SyncGroupRequestGroupAssignment, 0, len(members))
	for _, mem := range members {
		a := kmsg.ConsumerMemberAssignment{}
		for _, t := range slices.Sorted(maps.Keys(got[mem.MemberID])) {
			ps := make([]int32, 0, len(got[mem.MemberID][t]))
			for _, p := range got[mem.MemberID][t] {
				ps = append(ps, int32(p))
			}
			a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t, Partitions: ps})
		}
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID, sa.MemberAssignment = mem.MemberID, a.AppendTo(nil)
		out = append(out, sa)
	}
	return out, n, nil
}

// sync sends the SyncGroup of gen (with the leader's assignments) and fills in the member's
// partitions.
func (m *GroupMember) sync(ctx context.Context, gen Generation, assignments []kmsg.SyncGroupRequestGroupAssignment) (Generation, bool, error) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.Generation, req.MemberID, req.InstanceID = m.cfg.Group, gen.ID, gen.MemberID, m.instanceID()
	req.ProtocolType, req.Protocol = kmsg.StringPtr(consumerProtocolType), kmsg.StringPtr(gen.Protocol)
	req.GroupAssignment = assignments
	r, err := m.send(ctx, req, minSyncVersion, maxSyncVersion, m.cfg.RebalanceTimeout+m.cfg.SessionTimeout)
	if err != nil {
		return Generation{}, false, err
	}
	res := r.(*kmsg.SyncGroupResponse)
	switch err := codeErr(res.ErrorCode); {
	case errors.Is(err, kafka.RebalanceInProgress), errors.Is(err, kafka.IllegalGeneration):
		return Generation{}, true, err
	case errors.Is(err, kafka.UnknownMemberId):
		m.setMemberID("")
		return Generation{}, true, err
	case err != nil:
		return Generation{}, false, fmt.Errorf("kafkaio: syncing group %q: %w", m.cfg.Group, err)
	}
	var a kmsg.ConsumerMemberAssignment
	if len(res.MemberAssignment) > 0 {
		if err := a.ReadFrom(res.MemberAssignment); err != nil {
			return Generation{}, false, fmt.Errorf("kafkaio: group %q: assignment cannot be read: %w", m.cfg.Group, err)
		}
	}
	for _, t := range a.Topics {
		if t.Topic == m.cfg.Topic {
			for _, p := range t.Partitions {
				gen.Partitions = append(gen.Partitions, int(p))
			}
		}
	}
	slices.Sort(gen.Partitions)
	gen.Partitions = slices.Compact(gen.Partitions)
	return gen, false, nil
}

// Heartbeat sends one heartbeat for gen; it is not retried (heartbeats repeat anyway). It returns nil when the coordinator counts the member
// in gen, kafka.RebalanceInProgress (wrapped) when the member must rejoin, an error for which
// Fenced is true when the member or generation is gone, and another error when the
// coordinator could not be asked.
func (m *GroupMember) Heartbeat(ctx context.Context, gen Generation) error {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.Generation, req.MemberID, req.InstanceID = m.cfg.Group, gen.ID, gen.MemberID, m.instanceID()
	r, err := m.send(ctx, req, minHeartbeatVersion, maxHeartbeatVersion, m.cfg.SessionTimeout)
	if err != nil {
		return err
	}
	if err := codeErr(r.(*kmsg.HeartbeatResponse).ErrorCode); err != nil {
		return fmt.Errorf("kafkaio: heartbeat of group %q generation %d: %w", m.cfg.Group, gen.ID, err)
	}
	return nil
}

// Leave leaves the group, so that its partitions move to the other members at once. A static
// member does not leave (its partitions wait for it for the session timeout; see
// GroupConfig.InstanceID), and Leave returns nil for it.
func (m *GroupMember) Leave(ctx context.Context) error {
	id := m.MemberID()
	if m.cfg.InstanceID != "" || id == "" {
		return nil
	}
	return m.coordinatorRetry(ctx, func() error { return m.leave(ctx, id) })
}

func (m *GroupMember) leave(ctx context.Context, id string) error {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = m.cfg.Group
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = id
	req.Members = []kmsg.LeaveGroupRequestMember{lm}
	r, err := m.send(ctx, req, minLeaveVersion, maxLeaveVersion, m.cfg.SessionTimeout)
	if err != nil {
		return err
	}
	res := r.(*kmsg.LeaveGroupResponse)
	err = codeErr(res.ErrorCode)
	for _, mem := range res.Members {
		err = errors.Join(err, codeErr(mem.ErrorCode))
	}
	if err != nil && !errors.Is(err, kafka.UnknownMemberId) {
		return fmt.Errorf("kafkaio: leaving group %q: %w", m.cfg.Group, err)
	}
	m.setMemberID("")
	return nil
}

// Commit commits offsets (per partition of the topic) in gen, retried while the coordinator
// moves (see coordinatorRetry). It returns nil when every
// partition's commit was accepted; otherwise the first error, for which Fenced is true when
// the generation was lost.
func (m *GroupMember) Commit(ctx context.Context, gen Generation, offsets map[int]Committed) error {
	return m.coordinatorRetry(ctx, func() error { return m.commit(ctx, gen, offsets) })
}

func (m *GroupMember) commit(ctx context.Context, gen Generation, offsets map[int]Committed) error {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation, req.MemberID, req.InstanceID = m.cfg.Group, gen.ID, gen.MemberID, m.instanceID()
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = m.cfg.Topic
	for _, p := range slices.Sorted(maps.Keys(offsets)) {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = int32(p), offsets[p].Offset, offsets[p].LeaderEpoch
		rp.Metadata = kmsg.StringPtr(epochMetadata)
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = []kmsg.OffsetCommitRequestTopic{t}
	r, err := m.send(ctx, req, minOffsetCommitVersion, maxOffsetCommitVersion, m.cfg.SessionTimeout)
	if err != nil {
		return err
	}
	for _, rt := range r.(*kmsg.OffsetCommitResponse).Topics {
		for _, rp := range rt.Partitions {
			if err := codeErr(rp.ErrorCode); err != nil {
				return fmt.Errorf("kafkaio: committing offsets of group %q partition %d: %w", m.cfg.Group, rp.Partition, err)
			}
		}
	}
	return nil
}

// Fetch returns the group's committed offsets of partitions, retried while the coordinator
// moves; a partition with none is left out. Offsets that an open transaction commits are not
// waited for (no RequireStable): the transaction stays open until the partition's next
// transactional producer starts and aborts it, or the broker's transaction timeout does, so a
// transactional reader re-reads its offset after its producer started (CommittedOffsets).
func (m *GroupMember) Fetch(ctx context.Context, partitions []int) (map[int]Committed, error) {
	var out map[int]Committed
	err := m.coordinatorRetry(ctx, func() (err error) {
		out, err = m.fetch(ctx, partitions)
		return err
	})
	return out, err
}

func (m *GroupMember) fetch(ctx context.Context, partitions []int) (map[int]Committed, error) {
	r, err := m.send(ctx, offsetFetchRequest(m.cfg.Group, m.cfg.Topic, partitions), minOffsetFetchVersion, maxOffsetFetchVersion, m.cfg.SessionTimeout)
	if err != nil {
		return nil, err
	}
	out := make(map[int]Committed, len(partitions))
	if err := committedIn(r.(*kmsg.OffsetFetchResponse), m.cfg.Group, m.cfg.Topic, out); err != nil {
		return nil, err
	}
	return out, nil
}

// epochMetadata is the metadata kdedup commits its offsets with: it says that the leader epoch
// committed with the offset is the epoch of the record before it. An offset without it reads back
// with epoch -1 (no check), because kafka-go's TxnOffsetCommit, which earlier versions sent their
// exactly-once commits through, stores epoch 0 whatever the record's was: trusting it would make
// the partition's next owner, after any leader election, see a truncation to the end of epoch 0
// and read everything since again.
const epochMetadata = "kdedup:leader-epoch"

// offsetFetchRequest returns the OffsetFetch request of group's offsets of partitions of topic.
func offsetFetchRequest(group, topic string, partitions []int) *kmsg.OffsetFetchRequest {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic = topic
	for _, p := range partitions {
		t.Partitions = append(t.Partitions, int32(p))
	}
	req.Topics = []kmsg.OffsetFetchRequestTopic{t}
	return req
}

// committedIn sets out[p] to the offset and leader epoch res says group committed for partition
// p of topic (epoch -1 unless committed with epochMetadata), for each partition that has one, or
// returns res's error.
func committedIn(res *kmsg.OffsetFetchResponse, group, topic string, out map[int]Committed) error {
	if err := codeErr(res.ErrorCode); err != nil {
		return fmt.Errorf("kafkaio: committed offsets of group %q: %w", group, err)
	}
	for _, rt := range res.Topics {
		for _, rp := range rt.Partitions {
			if err := codeErr(rp.ErrorCode); err != nil {
				return fmt.Errorf("kafkaio: committed offset of group %q partition %d: %w", group, rp.Partition, err)
			}
			if rt.Topic == topic && rp.Offset >= 0 {
				epoch := rp.LeaderEpoch
				if rp.Metadata == nil || *rp.Metadata != epochMetadata {
					epoch = -1 // not committed by kdedup with the record's epoch
				}
				out[int(rp.Partition)] = Committed{Offset: rp.Offset, LeaderEpoch: epoch}
			}
		}
	}
	return nil
}
