package chain_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// countingRPC is the harness's RPC client, counting the status lookups and
// the signatures each names.
type countingRPC struct {
	*rpc.Client
	mu       sync.Mutex
	statuses []int // signatures per getSignatureStatuses call
	heights  int
	// named is closed once a call names at least notify signatures.
	notify int
	named  chan struct{}
}

func newCountingRPC(c *rpc.Client, notify int) *countingRPC {
	return &countingRPC{Client: c, notify: notify, named: make(chan struct{})}
}

func (c *countingRPC) GetSignatureStatuses(ctx context.Context, history bool, sigs ...solana.Signature) (*rpc.GetSignatureStatusesResult, error) {
	c.mu.Lock()
	c.statuses = append(c.statuses, len(sigs))
	if c.notify > 0 && len(sigs) >= c.notify {
		close(c.named)
		c.notify = 0
	}
	c.mu.Unlock()
	return c.Client.GetSignatureStatuses(ctx, history, sigs...)
}

func (c *countingRPC) GetBlockHeight(ctx context.Context, commitment rpc.CommitmentType) (uint64, error) {
	c.mu.Lock()
	c.heights++
	c.mu.Unlock()
	return c.Client.GetBlockHeight(ctx, commitment)
}

// calls returns the status calls' sizes and the height calls since the
// last reset, and resets them.
func (c *countingRPC) calls() (statuses []int, heights int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	statuses, heights = c.statuses, c.heights
	c.statuses, c.heights = nil, 0
	return statuses, heights
}

// paid is how many payments were made: each pays a different amount, so
// that no two are the same transaction (under one blockhash, the harness's
// until blocks pass, they would be).
var paid atomic.Uint64

// payments sends n distinct self-payments of the treasury and returns
// their signatures and last valid heights, landed or not as the harness
// decides.
func payments(t *testing.T, e *svmtest.Env, n int) ([]solana.Signature, []uint64) {
	t.Helper()
	ctx := context.Background()
	kp := e.Treasury
	from := e.MintTo(t, e.Config.USDCMint, onchain.TokenProgram, kp.PublicKey(), 1_000_000)
	var sigs []solana.Signature
	var lastValid []uint64
	for range n {
		bh, err := e.Chain.LatestBlockhash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ixs, err := e.Config.USDCPayout(kp.PublicKey(), kp.PublicKey(), from, kp.PublicKey(), paid.Add(1))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := onchain.NewTx(kp.PublicKey(), ixs, bh.Hash, onchain.Fees{ComputeUnits: 50_000, MicroLamportsPerCU: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := svmtest.Sign(tx, kp); err != nil {
			t.Fatal(err)
		}
		sig, err := e.Chain.Send(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, sig)
		lastValid = append(lastValid, bh.LastValidBlockHeight)
	}
	return sigs, lastValid
}

func fakeSig(i int) solana.Signature {
	a := sha256.Sum256([]byte(fmt.Sprint("never sent ", i)))
	b := sha256.Sum256(a[:])
	var s solana.Signature
	copy(s[:32], a[:])
	copy(s[32:], b[:])
	return s
}

// TestLookupAllBatches: LookupAll answers for hundreds of signatures —
// landed, held at confirmed, never sent — in one status call per 256 and
// one block height, and calls the never-sent ones expired only once their
// blockhash has.
func TestLookupAllBatches(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	counting := newCountingRPC(e.RPC, 0)
	ch := chain.New(counting)
	landed, landedLV := payments(t, e, 2)
	e.HoldFinality(t, true)
	held, heldLV := payments(t, e, 1)
	bh, err := ch.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sigs := append(append([]solana.Signature{}, landed...), held...)
	lastValid := append(append([]uint64{}, landedLV...), heldLV...)
	const never = 300
	for i := range never {
		sigs = append(sigs, fakeSig(i))
		lastValid = append(lastValid, bh.LastValidBlockHeight)
	}
	want := func(neverSent chain.Outcome) []chain.Outcome {
		out := []chain.Outcome{chain.Landed, chain.Landed, chain.Unknown}
		for range never {
			out = append(out, neverSent)
		}
		return out
	}
	counting.calls()
	for _, tc := range []struct {
		name    string
		advance int
		want    []chain.Outcome
	}{
		{"blockhash valid", 0, want(chain.Unknown)},
		{"blockhash expired", 151, want(chain.Expired)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.AdvanceBlocks(t, tc.advance)
			got, err := ch.LookupAll(ctx, sigs, lastValid)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				if got[i] != tc.want[i] {
					t.Fatalf("outcome %d = %v, want %v", i, got[i], tc.want[i])
				}
			}
			statuses, heights := counting.calls()
			if len(statuses) != 2 || statuses[0] != chain.MaxStatuses || statuses[1] != len(sigs)-chain.MaxStatuses || heights != 1 {
				t.Fatalf("%d signatures took status calls of %v and %d height calls; want %d and %d, and one",
					len(sigs), statuses, heights, chain.MaxStatuses, len(sigs)-chain.MaxStatuses)
			}
		})
	}
	if _, err := ch.LookupAll(ctx, sigs, lastValid[1:]); err == nil {
		t.Fatal("mismatched last valid heights were accepted")
	}
}

// TestConfirmSharesPolls: Confirm calls waiting at the same time are
// polled together, in one status call naming them all; a Confirm alone
// looks its signature up once, at once.
func TestConfirmSharesPolls(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	const n = 20
	counting := newCountingRPC(e.RPC, n)
	ch := chain.New(counting)
	ch.Poll = 5 * time.Millisecond
	ch.ConfirmTimeout = 20 * time.Second
	e.HoldFinality(t, true)
	sigs, lastValid := payments(t, e, n)
	counting.calls()
	outs := make([]chain.Outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			if outs[i], err = ch.Confirm(ctx, sigs[i], lastValid[i]); err != nil {
				t.Error(err)
			}
		})
	}
	select {
	case <-counting.named:
	case <-time.After(20 * time.Second):
		t.Fatal("no status call named every waiting signature")
	}
	e.Finalize(t)
	wg.Wait()
	for i, o := range outs {
		if o != chain.Landed {
			t.Fatalf("confirmation %d: %v, want landed", i, o)
		}
	}
	counting.calls()

	// Alone, a final transaction is one lookup.
	if o, err := ch.Confirm(ctx, sigs[0], lastValid[0]); err != nil || o != chain.Landed {
		t.Fatalf("confirm alone: %v, %v", o, err)
	}
	if statuses, heights := counting.calls(); len(statuses) != 1 || statuses[0] != 1 || heights != 0 {
		t.Fatalf("a lone confirmation made status calls %v and %d height calls; want one of one signature", statuses, heights)
	}
}

// TestConfirmTimesOutUnknown: a confirmation that outlasts ConfirmTimeout
// (or its context) is Unknown, not an error; the others waiting with it
// are not held up.
func TestConfirmTimesOutUnknown(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	ch := chain.New(e.RPC)
	ch.Poll = 5 * time.Millisecond
	ch.ConfirmTimeout = 300 * time.Millisecond
	e.HoldFinality(t, true)
	sigs, lastValid := payments(t, e, 1)
	if o, err := ch.Confirm(ctx, sigs[0], lastValid[0]); err != nil || o != chain.Unknown {
		t.Fatalf("held transaction: %v, %v; want unknown", o, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if o, err := ch.Confirm(cancelled, sigs[0], lastValid[0]); err != nil || o != chain.Unknown {
		t.Fatalf("cancelled: %v, %v; want unknown", o, err)
	}
	e.Finalize(t)
	if o, err := ch.Confirm(ctx, sigs[0], lastValid[0]); err != nil || o != chain.Landed {
		t.Fatalf("finalized: %v, %v; want landed", o, err)
	}
}

// TestLookupAllRefusesAShortAnswer: a node (faulty or hostile) answering
// fewer statuses than it was asked for, or none, is an error — never "not
// found", which past the last valid height would read as expired and let
// a landed transfer be sent again.
func TestLookupAllRefusesAShortAnswer(t *testing.T) {
	for name, value := range map[string]string{"one of two": `[null]`, "none": `null`, "empty": `[]`} {
		t.Run(name, func(t *testing.T) {
			node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
				}
				_ = json.NewDecoder(r.Body).Decode(&req)
				result := `{"context":{"slot":1},"value":` + value + `}`
				if req.Method == "getBlockHeight" {
					result = `1000000` // far past every last valid height
				}
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result)
			}))
			defer node.Close()
			sigs := []solana.Signature{{1}, {2}}
			out, err := chain.New(rpc.New(node.URL)).LookupAll(context.Background(), sigs, []uint64{10, 10})
			if err == nil {
				t.Fatalf("outcomes %v from a short answer, want an error", out)
			}
		})
	}
}
