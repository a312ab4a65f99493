package dynamo

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/schema"
)

// Partition key prefixes and fixed sort keys, one per record kind. The
// README lists which access pattern reads each.
const (
	pAccount  = "ACCT#"   // ACCT#<id> / ACCT: the account
	sAccount  = "ACCT"    //
	sKeyCount = "KEYS#"   // ACCT#<id> / KEYS#<kind>: active secrets of a kind
	sEarn     = "EARN#"   // ACCT#<id> / EARN#<shard>: part of a worker account's earnings
	pGrant    = "GRANT#"  // GRANT#<idempotency key> / GRANT
	pNonce    = "NONCE#"  // NONCE#<nonce> / NONCE
	pRate     = "RATE#"   // RATE#<key hash> / <window>
	pAcctRate = "ARATE#"  // ARATE#<account id> / <window>: all the account's keys
	pJob      = "JOB#"    // JOB#<id> / JOB
	sReceipt  = "RECEIPT" // JOB#<id> / RECEIPT: the worker's receipt of a completed job
	pWorker   = "WORKER#" // WORKER#<conn> / WORKER
	sConn     = "CONN#"   // <TOKEN#hash> / CONN#<conn>: live workers on a token
	sLive     = "LIVE"    // <TOKEN#hash> / LIVE: how many, for the per-token cap
	pListener = "LISTENER#"
	pStats    = "STATS#" // STATS#<shard> / TOTAL, MIN#<minute>, QUEUE, ONLINE#<bucket>
	sTotal    = "TOTAL"
	sMinute   = "MIN#"
	sQueued   = "QUEUE"    // STATS#<shard> / QUEUE: queued jobs by model
	sOnline   = "ONLINE#"  // STATS#<shard> / ONLINE#<bucket>: connected and registered workers whose records expire in the bucket
	sIdentity = "IDENT#"   // ACCT#<id> / IDENT#<pubkey>: a worker identity's reputation
	sTokenRep = "STANDING" // <TOKEN#hash> / STANDING: the token's strikes and standing
	pVerdict  = "VERDICT#" // VERDICT#<job>#<pubkey> / VERDICT: a verdict applied, kept forever
	sLedger   = "LEDGER#"  // ACCT#<id> / LEDGER#<entry id>: a line of the account's ledger, kept forever
	// A deposit intent's sort keys start with I, past GetAccount's range
	// (ACCT to EARN#~), which a DEPOSIT# would fall in.
	sDeposit   = "INTENT#"   // ACCT#<id> / INTENT#<intent id>: a deposit intent, kept forever
	sDepositAt = "INTENTAT#" // ACCT#<id> / INTENTAT#<created>#<intent id>: the account's intents in time order
	pDepRef    = "DEPREF#"   // DEPREF#<reference> / DEPREF: the intent a reference is taken by, kept forever
	pPaidTo    = "PAYTO#"    // PAYTO#<wallet> / ACCT#<id>: an account that proved this payout wallet

	gQueue  = "Q#" // index partition of queued jobs: Q#<model>#<shard>
	gWorker = "W#" // index partition of live workers: W#<shard>
	gEarn   = "E#" // index partition of earnings shards: E#<shard of the account>
	gIdent  = "I#" // index partition of identities' reputations: I#<shard of the pubkey>
	gDep    = "D#" // index partition of deposit intents: D#<shard of account and id>
)

// Attribute names used in expressions.
const (
	aCredits   = "credits"
	aWallet    = "wallet"
	aLastReq   = "last_request"
	aPayoutReq = "payout_requested"
	aAllowDay  = "allowance_day"
	aDeposited = "deposited"
	aSpent     = "spent"
	aAllowance = "allowance"
	aEarned    = "earned"
	aActive    = "active"
	aRevoked   = "revoked"
	aAccount   = "account"
	aCount     = "count"
	aExpires   = "expires"
	aState     = "state"
	aWorker    = "worker"
	aWorkerAcc = "worker_account"
	aWorkerPub = "worker_pubkey"
	aPubkey    = "pubkey"
	aAttempts  = "attempts"
	aUpdated   = "updated"
	aRefunded  = "refunded"
	aReason    = "fail_reason"
	aPrompt    = "prompt_tokens"
	aComplete  = "completion_tokens"
	aPrice     = "price"
	aJob       = "job"
	aModels    = "models"
	aReg       = "registered"
	aDraining  = "draining"
	aSpeed     = "milli_tok_per_sec"
	aJobs      = "jobs"
	aTokens    = "tokens"
	aVersion   = "ver"
	aTokenHash = "token_hash"
	aCaps      = "caps"
	aStanding  = "standing"
	aStrikes   = "strikes"
	aTrusted   = "trusted"
	aLastSeen  = "last_seen"
	aFirstSeen = "first_seen"
	aLastWhy   = "last_reason"
	aJobsDone  = "jobs_completed"
	aRejected  = "jobs_rejected"
	aPassed    = "canaries_passed"
	aFailed    = "canaries_failed"
	aRepEarned = "earned_credits"
	aName      = "name"
	aLimit     = "limit"
	aReset     = "limit_reset"
	aExpiresAt = "expires_at"
	aUsage     = "usage"
	aPerUsage  = "period_usage"
	aPeriod    = "period"
)

type key struct {
	PK string `dynamodbav:"pk"`
	SK string `dynamodbav:"sk"`
}

func (k key) av() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.PK: str(k.PK), schema.SK: str(k.SK)}
}

func accountKey(id string) key          { return key{pAccount + id, sAccount} }
func grantKey(idem string) key          { return key{pGrant + idem, "GRANT"} }
func nonceKey(n string) key             { return key{pNonce + n, "NONCE"} }
func jobKey(id string) key              { return key{pJob + id, "JOB"} }
func receiptKey(jobID string) key       { return key{pJob + jobID, sReceipt} }
func workerKey(conn string) key         { return key{pWorker + conn, "WORKER"} }
func listenerKey(c string) key          { return key{pListener + c, "LISTENER"} }
func rateKey(h string, w time.Time) key { return key{pRate + h, timeKey(w)} }

// accountRateKey is the window counter of all an account's keys together.
func accountRateKey(account string, w time.Time) key { return key{pAcctRate + account, timeKey(w)} }

// earnKey is the earnings shard of account that a job's earning goes to.
func earnKey(account, jobID string) key {
	return key{pAccount + account, fmt.Sprintf("%s%d", sEarn, shard(jobID, earnShards))}
}

// timeKey encodes t so that string order is time order: the nanoseconds
// with the sign bit flipped, as 20 decimal digits.
func timeKey(t time.Time) string {
	return fmt.Sprintf("%020d", uint64(t.UnixNano())^(1<<63))
}

// shard maps s to one of n shards, stably: the same job or connection
// always lands on the same shard, so retries and readers agree.
func shard(s string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(s))
	return int(h.Sum32() % uint32(n))
}

func queuePartition(model, jobID string) string {
	return fmt.Sprintf("%s%s#%d", gQueue, model, shard(jobID, queueShards))
}

func workerPartition(conn string) string {
	return fmt.Sprintf("%s%d", gWorker, shard(conn, workerShards))
}

// Times are stored as Unix nanoseconds; 0 (absent) is the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// ttl is an expiry in epoch seconds, the form DynamoDB's TTL reads.
func ttl(t time.Time) int64 { return t.Unix() }

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue  { return &types.AttributeValueMemberN{Value: fmt.Sprint(n)} }
func boolean(b bool) types.AttributeValue {
	return &types.AttributeValueMemberBOOL{Value: b}
}

// accountItem is an account as stored.
type accountItem struct {
	key
	ID        string `dynamodbav:"id"`
	Wallet    string `dynamodbav:"wallet,omitempty"`
	Credits   int64  `dynamodbav:"credits"`
	Deposited int64  `dynamodbav:"deposited"`
	Spent     int64  `dynamodbav:"spent"`
	Allowance int64  `dynamodbav:"allowance"`
	Earned    int64  `dynamodbav:"earned"`
	PaidOut   int64  `dynamodbav:"paid_out"`
	Created   int64  `dynamodbav:"created,omitempty"`
	// BoostUntil is Account.StakeBoostUntil.
	BoostUntil int64 `dynamodbav:"boost_until,omitempty"`
	// AllowanceDay and LastRequest are Account's.
	AllowanceDay    string `dynamodbav:"allowance_day,omitempty"`
	LastRequest     int64  `dynamodbav:"last_request,omitempty"`
	PayoutRequested int64  `dynamodbav:"payout_requested,omitempty"`
	// GPK and GSK put an account created with earnings in the index's
	// earnings partitions (earnings shards are there from their first
	// earning).
	GPK string `dynamodbav:"gpk,omitempty"`
	GSK string `dynamodbav:"gsk,omitempty"`
}

func toAccountItem(a store.Account) accountItem {
	i := accountItem{key: accountKey(a.ID), ID: a.ID, Wallet: a.Wallet, Credits: a.Credits,
		Deposited: a.TotalDeposited, Spent: a.TotalSpent, Allowance: a.FreeAllowanceLeft,
		Earned: a.Earned, PaidOut: a.PaidOut, Created: nanos(a.CreatedAt)}
	if !a.StakeBoostUntil.IsZero() {
		i.BoostUntil = nanos(a.StakeBoostUntil)
	}
	i.AllowanceDay = a.AllowanceDay
	if !a.LastRequest.IsZero() {
		i.LastRequest = nanos(a.LastRequest)
	}
	if !a.PayoutRequested.IsZero() {
		i.PayoutRequested = nanos(a.PayoutRequested)
	}
	if a.Earned > 0 {
		i.GPK, i.GSK = earnPartition(a.ID), a.ID+"#"+sAccount
	}
	return i
}

// earnPartition is the index partition of an account's earnings.
func earnPartition(account string) string {
	return fmt.Sprintf("%s%d", gEarn, shard(account, earnShards))
}

func (i accountItem) account() store.Account {
	return store.Account{ID: i.ID, Wallet: i.Wallet, Credits: i.Credits, TotalDeposited: i.Deposited,
		TotalSpent: i.Spent, FreeAllowanceLeft: i.Allowance, Earned: i.Earned, PaidOut: i.PaidOut,
		CreatedAt: fromNanos(i.Created), StakeBoostUntil: optionalTime(i.BoostUntil), AllowanceDay: i.AllowanceDay,
		LastRequest: optionalTime(i.LastRequest), PayoutRequested: optionalTime(i.PayoutRequested)}
}

// optionalTime is a stored time that may be absent: absent is zero.
func optionalTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return fromNanos(n)
}

// secretItem is an API key or worker token: once under its hash (the
// lookup on every request) and once in its account's partition (listing,
// oldest first), written together. The hash item is the record: Admit
// counts the usage there, and a name or spend controls change there only;
// the account's item says which secrets there are, and in what order.
// Empty strings and zero numbers are not stored, so that an attribute
// that is absent is the zero value in conditions too.
type secretItem struct {
	key
	Hash        string `dynamodbav:"hash"`
	ID          string `dynamodbav:"id"`
	Account     string `dynamodbav:"account"`
	Created     int64  `dynamodbav:"created,omitempty"`
	Revoked     int64  `dynamodbav:"revoked,omitempty"`
	Name        string `dynamodbav:"name,omitempty"`
	Limit       int64  `dynamodbav:"limit,omitempty"`
	Reset       string `dynamodbav:"limit_reset,omitempty"`
	Expires     int64  `dynamodbav:"expires_at,omitempty"`
	Usage       int64  `dynamodbav:"usage,omitempty"`
	PeriodUsage int64  `dynamodbav:"period_usage,omitempty"`
	Period      string `dynamodbav:"period,omitempty"`
}

func toSecretItem(k key, s store.Secret) secretItem {
	return secretItem{key: k, Hash: s.Hash, ID: s.ID, Account: s.AccountID,
		Created: nanos(s.CreatedAt), Revoked: nanos(s.RevokedAt), Name: s.Name, Limit: s.Limit,
		Reset: s.LimitReset, Expires: nanos(s.ExpiresAt), Usage: s.Usage, PeriodUsage: s.PeriodUsage,
		Period: s.Period}
}

func (i secretItem) secret() store.Secret {
	return store.Secret{Hash: i.Hash, ID: i.ID, AccountID: i.Account,
		CreatedAt: fromNanos(i.Created), RevokedAt: fromNanos(i.Revoked), Name: i.Name, Limit: i.Limit,
		LimitReset: i.Reset, ExpiresAt: fromNanos(i.Expires), Usage: i.Usage, PeriodUsage: i.PeriodUsage,
		Period: i.Period}
}

// jobItem is a job. GPK and GSK are set while it is queued, which puts it
// in the index's queue partitions.
type jobItem struct {
	key
	GPK              string `dynamodbav:"gpk,omitempty"`
	GSK              string `dynamodbav:"gsk,omitempty"`
	ID               string `dynamodbav:"id"`
	Account          string `dynamodbav:"account"`
	Model            string `dynamodbav:"model"`
	Price            int64  `dynamodbav:"price"`
	FromAllowance    int64  `dynamodbav:"from_allowance"`
	State            string `dynamodbav:"state"`
	Listener         string `dynamodbav:"listener"`
	Worker           string `dynamodbav:"worker"`
	WorkerAccount    string `dynamodbav:"worker_account"`
	WorkerPubkey     string `dynamodbav:"worker_pubkey,omitempty"`
	Attempts         int64  `dynamodbav:"attempts"`
	Created          int64  `dynamodbav:"created"`
	Updated          int64  `dynamodbav:"updated"`
	Refunded         bool   `dynamodbav:"refunded"`
	FailReason       string `dynamodbav:"fail_reason"`
	PromptTokens     int64  `dynamodbav:"prompt_tokens"`
	CompletionTokens int64  `dynamodbav:"completion_tokens"`
	Canary           bool   `dynamodbav:"canary,omitempty"`
	Target           string `dynamodbav:"target,omitempty"`
	// Needs is the job's needs, in the form of capabilities: the same
	// four fields.
	Needs capsItem `dynamodbav:"needs"`
	// KeyHash is the API key the job was admitted with.
	KeyHash string `dynamodbav:"key_hash,omitempty"`
}

// capsItem is a worker's capabilities for one model, or a job's needs.
type capsItem struct {
	Vision         bool  `dynamodbav:"vision,omitempty"`
	Tools          bool  `dynamodbav:"tools,omitempty"`
	ResponseFormat bool  `dynamodbav:"response_format,omitempty"`
	Context        int64 `dynamodbav:"context,omitempty"`
	Image          bool  `dynamodbav:"image,omitempty"`
}

func toCapsItems(caps map[string]store.Caps) map[string]capsItem {
	if len(caps) == 0 {
		return nil
	}
	out := make(map[string]capsItem, len(caps))
	for m, c := range caps {
		out[m] = capsItem(c)
	}
	return out
}

func fromCapsItems(items map[string]capsItem) map[string]store.Caps {
	if len(items) == 0 {
		return nil
	}
	out := make(map[string]store.Caps, len(items))
	for m, c := range items {
		out[m] = store.Caps(c)
	}
	return out
}

// queueSortKey orders a model's queue by age, then id.
func queueSortKey(j store.Job) string { return timeKey(j.Created) + "#" + j.ID }

func toJobItem(j store.Job) jobItem {
	i := jobItem{key: jobKey(j.ID), ID: j.ID, Account: j.AccountID, Model: j.Model, Price: j.Price,
		FromAllowance: j.FromAllowance, State: string(j.State), Listener: j.Listener, Worker: j.Worker,
		WorkerAccount: j.WorkerAccount, WorkerPubkey: j.WorkerPubkey, Attempts: int64(j.Attempts), Created: nanos(j.Created),
		Updated: nanos(j.Updated), Refunded: j.Refunded, FailReason: j.FailReason,
		PromptTokens: j.PromptTokens, CompletionTokens: j.CompletionTokens,
		Canary: j.Canary, Target: j.Target, Needs: capsItem(j.Needs), KeyHash: j.KeyHash}
	if j.State == store.JobQueued {
		i.GPK, i.GSK = queuePartition(j.Model, j.ID), queueSortKey(j)
	}
	return i
}

func (i jobItem) job() store.Job {
	return store.Job{ID: i.ID, AccountID: i.Account, Model: i.Model, Price: i.Price,
		FromAllowance: i.FromAllowance, State: store.JobState(i.State), Listener: i.Listener,
		Worker: i.Worker, WorkerAccount: i.WorkerAccount, WorkerPubkey: i.WorkerPubkey, Attempts: int(i.Attempts),
		Created: fromNanos(i.Created), Updated: fromNanos(i.Updated), Refunded: i.Refunded,
		FailReason: i.FailReason, PromptTokens: i.PromptTokens, CompletionTokens: i.CompletionTokens,
		Canary: i.Canary, Target: i.Target, Needs: store.Needs(i.Needs), KeyHash: i.KeyHash}
}

// workerItem is a live worker, in the index's worker partitions for as
// long as it exists.
type workerItem struct {
	key
	GPK         string              `dynamodbav:"gpk"`
	GSK         string              `dynamodbav:"gsk"`
	Conn        string              `dynamodbav:"conn"`
	Account     string              `dynamodbav:"account"`
	TokenHash   string              `dynamodbav:"token_hash"`
	Pubkey      string              `dynamodbav:"pubkey"`
	Models      []string            `dynamodbav:"models"`
	State       string              `dynamodbav:"state"`
	Job         string              `dynamodbav:"job"`
	Speed       int64               `dynamodbav:"milli_tok_per_sec"`
	Registered  bool                `dynamodbav:"registered"`
	Draining    bool                `dynamodbav:"draining"`
	ConnectedAt int64               `dynamodbav:"connected_at,omitempty"`
	TTL         int64               `dynamodbav:"ttl"`
	Caps        map[string]capsItem `dynamodbav:"caps,omitempty"`
	Standing    string              `dynamodbav:"standing"`
	Strikes     int64               `dynamodbav:"strikes"`
}

func toWorkerItem(w store.Worker, now time.Time) workerItem {
	models := w.Models
	if models == nil {
		models = []string{} // a list attribute, never NULL, so list functions work
	}
	return workerItem{key: workerKey(w.Conn), GPK: workerPartition(w.Conn), GSK: w.Conn,
		Conn: w.Conn, Account: w.AccountID, TokenHash: w.TokenHash, Pubkey: w.Pubkey, Models: models,
		State: string(w.State), Job: w.Job, Speed: w.MilliTokPerSec, Registered: w.Registered,
		Draining: w.Draining, ConnectedAt: nanos(w.ConnectedAt), TTL: ttl(now.Add(connectionTTL)),
		Caps: toCapsItems(w.Caps), Standing: string(w.Standing), Strikes: w.Strikes}
}

func (i workerItem) worker() store.Worker {
	var models []string
	if len(i.Models) > 0 {
		models = i.Models
	}
	return store.Worker{Conn: i.Conn, AccountID: i.Account, TokenHash: i.TokenHash, Pubkey: i.Pubkey,
		Models: models, State: store.WorkerState(i.State), Job: i.Job, MilliTokPerSec: i.Speed,
		Registered: i.Registered, Draining: i.Draining, ConnectedAt: fromNanos(i.ConnectedAt),
		Caps: fromCapsItems(i.Caps), Standing: store.Standing(i.Standing), Strikes: i.Strikes}
}

// identityItem is a worker identity's reputation, in its account's
// partition (listed per account without a scan) and in the index's
// identity partitions (listed for every account). Its counts only ever
// change by ADD; ver goes up with every verdict, the only change of its
// strikes and standing, so that a verdict or a connect conditioned on the
// ver it read knows that the standing it read still holds.
type identityItem struct {
	key
	GPK            string `dynamodbav:"gpk"`
	GSK            string `dynamodbav:"gsk"`
	Pubkey         string `dynamodbav:"pubkey"`
	Account        string `dynamodbav:"account"`
	TokenHash      string `dynamodbav:"token_hash"`
	Standing       string `dynamodbav:"standing"`
	Strikes        int64  `dynamodbav:"strikes"`
	Trusted        bool   `dynamodbav:"trusted"`
	JobsCompleted  int64  `dynamodbav:"jobs_completed"`
	JobsRejected   int64  `dynamodbav:"jobs_rejected"`
	CanariesPassed int64  `dynamodbav:"canaries_passed"`
	CanariesFailed int64  `dynamodbav:"canaries_failed"`
	Earned         int64  `dynamodbav:"earned_credits"`
	Speed          int64  `dynamodbav:"milli_tok_per_sec"`
	LastReason     string `dynamodbav:"last_reason"`
	FirstSeen      int64  `dynamodbav:"first_seen"`
	LastSeen       int64  `dynamodbav:"last_seen"`
	Version        int64  `dynamodbav:"ver"`
}

// identityKey is an identity's reputation, in its account's partition.
func identityKey(account, pubkey string) key { return key{pAccount + account, sIdentity + pubkey} }

// identityIndex is the index partition and sort key of an identity's
// reputation. The partition is chosen by pubkey, not account: one
// operator's many GPUs complete jobs at once, and each completion
// changes its identity's item, and with it the index entry.
func identityIndex(account, pubkey string) (gpk, gsk string) {
	return fmt.Sprintf("%s%d", gIdent, shard(pubkey, identityShards)), account + "#" + pubkey
}

func (i identityItem) reputation() store.Reputation {
	standing := store.Standing(i.Standing)
	if standing == "" {
		standing = store.StandingActive // created by a completion before any connect
	}
	return store.Reputation{Pubkey: i.Pubkey, AccountID: i.Account, TokenHash: i.TokenHash, Standing: standing,
		Strikes: i.Strikes, Trusted: i.Trusted, JobsCompleted: i.JobsCompleted, JobsRejected: i.JobsRejected,
		CanariesPassed: i.CanariesPassed, CanariesFailed: i.CanariesFailed, EarnedCredits: i.Earned,
		MilliTokPerSec: i.Speed, LastReason: i.LastReason, FirstSeen: fromNanos(i.FirstSeen), LastSeen: fromNanos(i.LastSeen)}
}

// tokenStandingItem is a worker token's record: the strikes of all its
// identities together and the standing they give, with a ver like an
// identity's. It is an item of its own next to the token's, as a token
// the store does not know (a worker without one in the store) can be
// judged too.
type tokenStandingItem struct {
	key
	Standing string `dynamodbav:"standing"`
	Strikes  int64  `dynamodbav:"strikes"`
	Version  int64  `dynamodbav:"ver"`
}

func tokenStandingKey(tokenHash string) key {
	return key{workerTokens.hashKey(tokenHash).PK, sTokenRep}
}

func (i tokenStandingItem) standing() store.Standing {
	if i.Standing == "" {
		return store.StandingActive
	}
	return store.Standing(i.Standing)
}

// verdictKey is the record that a verdict was applied.
func verdictKey(jobID, pubkey string) key { return key{pVerdict + jobID + "#" + pubkey, "VERDICT"} }

// receiptItem is a completed job's receipt, next to the job in its
// partition, written by Complete's transaction.
type receiptItem struct {
	key
	Job              string `dynamodbav:"job"`
	Account          string `dynamodbav:"account"`
	Worker           string `dynamodbav:"worker"`
	Model            string `dynamodbav:"model"`
	ModelDigest      string `dynamodbav:"model_digest"`
	RequestSHA256    string `dynamodbav:"request_sha256"`
	OutputSHA256     string `dynamodbav:"output_sha256"`
	Deltas           int64  `dynamodbav:"deltas"`
	PromptTokens     int64  `dynamodbav:"prompt_tokens"`
	CompletionTokens int64  `dynamodbav:"completion_tokens"`
	FirstTokenMillis int64  `dynamodbav:"first_token_ms"`
	TotalMillis      int64  `dynamodbav:"total_ms"`
	Signature        string `dynamodbav:"signature"`
}

func toReceiptItem(r store.Receipt) receiptItem {
	return receiptItem{key: receiptKey(r.JobID), Job: r.JobID, Account: r.AccountID, Worker: r.WorkerPubkey,
		Model: r.Model, ModelDigest: r.ModelDigest, RequestSHA256: r.RequestSHA256, OutputSHA256: r.OutputSHA256,
		Deltas: r.Deltas, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
		FirstTokenMillis: r.FirstTokenMillis, TotalMillis: r.TotalMillis, Signature: r.Signature}
}

func (i receiptItem) receipt() store.Receipt {
	return store.Receipt{JobID: i.Job, AccountID: i.Account, WorkerPubkey: i.Worker, Model: i.Model,
		ModelDigest: i.ModelDigest, RequestSHA256: i.RequestSHA256, OutputSHA256: i.OutputSHA256,
		Deltas: i.Deltas, PromptTokens: i.PromptTokens, CompletionTokens: i.CompletionTokens,
		FirstTokenMillis: i.FirstTokenMillis, TotalMillis: i.TotalMillis, Signature: i.Signature}
}

type listenerItem struct {
	key
	Conn        string `dynamodbav:"conn"`
	ConnectedAt int64  `dynamodbav:"connected_at,omitempty"`
	TTL         int64  `dynamodbav:"ttl"`
}

func marshal(v any) (map[string]types.AttributeValue, error) {
	m, err := attributevalue.MarshalMap(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return m, nil
}

func unmarshal(m map[string]types.AttributeValue, v any) error {
	if err := attributevalue.UnmarshalMap(m, v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	return nil
}

// names builds ExpressionAttributeNames for plain attribute names: "#x" → "x".
func names(attrs ...string) map[string]string {
	m := make(map[string]string, len(attrs))
	for _, a := range attrs {
		m["#"+a] = a
	}
	return m
}

// tableName is a convenience for the many inputs that need *string.
func (s *Store) tableName() *string { return aws.String(s.table) }
