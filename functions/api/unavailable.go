package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// recheckAge is how old the figures may be when unavailable reads them
// again.
const recheckAge = 500 * time.Millisecond

// unavailable is the error to answer a request r for model with when no worker serves
// it now and none did lately (store.Stats.RecentModels): a 503 at once
// that names the models with workers online, rather than a wait in the
// queue for a worker unlikely to come. nil lets the request queue, as it
// does when a worker left a moment ago and may be back (a reconnect), and
// when the store cannot say.
func (s *Server) unavailable(r *http.Request, model string) error {
	ctx := r.Context()
	st, err := s.networkStats(ctx)
	if err == nil && (st.WorkersByModel[model] > 0 || st.RecentModels[model]) {
		return nil
	}
	if err == nil {
		// The cached figures may predate a worker that just registered:
		// they are read again before the answer is no, at most twice a
		// second and by one caller at a time (requests for a model
		// nobody serves, however many, cost the store no more).
		st, err = s.readStats(ctx, recheckAge)
	}
	if err != nil {
		s.log.Warn("network figures for the availability check", "err", err)
		return nil
	}
	if st.WorkersByModel[model] > 0 || st.RecentModels[model] {
		return nil
	}
	// The key may have come from the cache (Admit checks it, but no Admit
	// comes): a key no longer valid hears that, not that no worker is.
	if _, err := s.liveKey(ctx, who(r).keyHash); err != nil {
		return err
	}
	var online []string
	for _, id := range s.catalog.IDs() {
		if st.WorkersByModel[id] > 0 {
			online = append(online, id)
		}
	}
	msg := fmt.Sprintf("No worker serving %s is online, and none has been lately. ", model)
	if len(online) > 0 {
		msg += "Models with workers online now: " + strings.Join(online, ", ") + ". "
	} else {
		msg += "No model has a worker online now. "
	}
	return &oaiwire.Error{Status: http.StatusServiceUnavailable, Type: oaiwire.TypeUnavailable, Code: oaiwire.ErrNoWorker.Code,
		Message: msg + "The request was not charged."}
}
