package api

import (
	"fmt"
	"net/http"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// creditsPerUSD: 1 credit = $0.01.
const creditsPerUSD = 100

type balanceJSON struct {
	Object            string `json:"object"`
	Credits           int64  `json:"credits"`
	USD               string `json:"usd"`
	TotalDeposited    int64  `json:"total_deposited"`
	TotalSpent        int64  `json:"total_spent"`
	FreeAllowanceLeft int64  `json:"free_allowance_left"`
}

// usd formats credits as exact dollars ("12.34"), never through a float.
func usd(credits int64) string {
	sign := ""
	if credits < 0 {
		sign, credits = "-", -credits
	}
	return fmt.Sprintf("%s%d.%02d", sign, credits/creditsPerUSD, credits%creditsPerUSD)
}

func (s *Server) balance(w http.ResponseWriter, r *http.Request) error {
	a, err := s.store.GetAccount(r.Context(), who(r).account)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, balanceJSON{Object: "balance", Credits: a.Credits, USD: usd(a.Credits),
		TotalDeposited: a.TotalDeposited, TotalSpent: a.TotalSpent, FreeAllowanceLeft: a.FreeAllowanceLeft})
}

func notFound(what, id string) *oaiwire.Error {
	return &oaiwire.Error{Status: http.StatusNotFound, Type: oaiwire.TypeInvalidRequest, Code: "not_found",
		Message: "No " + what + " with id " + id + " on this account."}
}
