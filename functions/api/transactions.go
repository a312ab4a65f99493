package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
)

// transactionJSON is one line of an account's ledger as its owner reads
// it: amounts, ids and times, never text.
type transactionJSON struct {
	Object string `json:"object"`
	ID     string `json:"id"`
	// Type is deposit, grant, charge, refund, allowance, earning or
	// payout.
	Type string `json:"type"`
	// Credits is the signed change: of the balance (deposit, grant,
	// charge, refund), of earnings (earning) or of what was paid out
	// (payout). Allowance is the change of the free allowance (charge,
	// refund), or the allowance set (allowance).
	Credits   int64  `json:"credits"`
	Allowance int64  `json:"allowance,omitempty"`
	JobID     string `json:"job_id,omitempty"`
	// Signature is the transaction of a deposit, or of a payout once the
	// keeper signed it, with the payout's State (planned, sent,
	// confirmed or failed); Ref the key of a grant, allowance or payout.
	Signature string `json:"signature,omitempty"`
	State     string `json:"state,omitempty"`
	Ref       string `json:"ref,omitempty"`
	Created   int64  `json:"created"`
}

type transactionsJSON struct {
	Object  string            `json:"object"`
	Data    []transactionJSON `json:"data"`
	HasMore bool              `json:"has_more"`
	// NextCursor reads the page after this one (?cursor=).
	NextCursor string `json:"next_cursor,omitempty"`
}

// depositRef is how a deposit's idempotency key starts (onchain/deposit):
// the rest is the transaction signature.
const depositRef = "deposit:"

// payoutGiveBack ends the key of the entry that gives back a failed
// payout's reservation (onchain/keeper).
const payoutGiveBack = "/failed"

// transactionsPage bounds a page of GET /v1/transactions.
const transactionsPage = 100

// transactions serves GET /v1/transactions?cursor=&limit=: the caller's
// account's ledger, newest first.
func (s *Server) transactions(w http.ResponseWriter, r *http.Request) error {
	limit := transactionsPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > transactionsPage {
			return oaiwire.InvalidRequest("limit", "limit is a whole number from 1 to 100")
		}
		limit = n
	}
	cursor := r.URL.Query().Get("cursor")
	if len(cursor) > 512 {
		return oaiwire.InvalidRequest("cursor", "cursor is the next_cursor of a previous page")
	}
	// One more than the page says whether another page follows.
	es, err := s.store.Entries(r.Context(), who(r).account, cursor, limit+1)
	if err != nil {
		return err
	}
	out := transactionsJSON{Object: "list", Data: []transactionJSON{}}
	if len(es) > limit {
		es, out.HasMore = es[:limit], true
	}
	for _, e := range es {
		t := transactionJSON{Object: "transaction", ID: e.ID, Type: string(e.Kind), Credits: e.Credits, Allowance: e.Allowance,
			JobID: e.JobID, Ref: e.Ref, Created: e.At.Unix()}
		if e.Kind == store.EntryDeposit && strings.HasPrefix(e.Ref, depositRef) {
			t.Signature, t.Ref = strings.TrimPrefix(e.Ref, depositRef), ""
		}
		if e.Kind == store.EntryPayout {
			// A payout's entry is keyed by its transfer in the keeper's
			// ledger (a failed one's give-back by that key + "/failed").
			tr, err := s.store.GetTransfer(r.Context(), strings.TrimSuffix(e.Ref, payoutGiveBack))
			switch {
			case err == nil:
				t.Signature, t.State = tr.Signature, string(tr.State)
			case !errors.Is(err, store.ErrNotFound):
				return err
			}
		}
		out.Data = append(out.Data, t)
	}
	if out.HasMore {
		out.NextCursor = es[len(es)-1].ID
	}
	return writeJSON(w, http.StatusOK, out)
}
