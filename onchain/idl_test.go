package onchain_test

import (
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestIDLDiscriminators: every discriminator in our IDLs is Anchor's
// sha256("global:<ix>" | "account:<Name>" | "event:<Name>")[:8], and every
// account and event has its type defined.
func TestIDLDiscriminators(t *testing.T) {
	for _, name := range []string{"zero_staking", "zero_rewards"} {
		b, err := os.ReadFile(filepath.Join("idl", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var idl struct {
			Address  string `json:"address"`
			Metadata struct {
				Name string `json:"name"`
				Spec string `json:"spec"`
			} `json:"metadata"`
			Instructions []struct {
				Name string `json:"name"`
				Disc []int  `json:"discriminator"`
			} `json:"instructions"`
			Accounts []struct {
				Name string `json:"name"`
				Disc []int  `json:"discriminator"`
			} `json:"accounts"`
			Events []struct {
				Name string `json:"name"`
				Disc []int  `json:"discriminator"`
			} `json:"events"`
			Types []struct {
				Name string `json:"name"`
			} `json:"types"`
		}
		if err := json.Unmarshal(b, &idl); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if idl.Metadata.Name != name || idl.Metadata.Spec == "" || idl.Address == "" {
			t.Fatalf("%s: metadata %+v, address %q", name, idl.Metadata, idl.Address)
		}
		want := func(prefix, n string, got []int) {
			h := sha256.Sum256([]byte(prefix + ":" + n))
			if len(got) != 8 {
				t.Errorf("%s %s %s: discriminator %v", name, prefix, n, got)
				return
			}
			for i := range 8 {
				if got[i] != int(h[i]) {
					t.Errorf("%s %s %s: discriminator %v, want %v", name, prefix, n, got, h[:8])
					return
				}
			}
		}
		types := map[string]bool{}
		for _, ty := range idl.Types {
			types[ty.Name] = true
		}
		for _, ix := range idl.Instructions {
			want("global", ix.Name, ix.Disc)
		}
		for _, a := range idl.Accounts {
			want("account", a.Name, a.Disc)
			if !types[a.Name] {
				t.Errorf("%s: account %s has no type", name, a.Name)
			}
		}
		for _, ev := range idl.Events {
			want("event", ev.Name, ev.Disc)
			if !types[ev.Name] {
				t.Errorf("%s: event %s has no type", name, ev.Name)
			}
		}
	}
}
