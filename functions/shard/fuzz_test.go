package shard

import (
	"bytes"
	"encoding/json"
	"testing"
)

// fuzzDecode checks a decoder never panics on any bytes, and that whatever
// it accepts re-encodes to JSON that decodes again to the same canonical
// bytes (so what was signed is what is stored and forwarded).
func fuzzDecode[T any](f *testing.F, decode func([]byte) (T, error), canon func(*T) []byte) {
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decode(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("accepted value does not re-encode: %v", err)
		}
		w, err := decode(again)
		if err != nil {
			t.Fatalf("re-encoded value is rejected: %v\n%s", err, again)
		}
		if !bytes.Equal(canon(&v), canon(&w)) {
			t.Fatalf("canonical bytes change across a JSON round trip")
		}
	})
}

func FuzzDecodeCapability(f *testing.F) {
	fuzzDecode(f, DecodeCapability, func(v *Capability) []byte { return v.canonical() })
}

func FuzzDecodeRTTRow(f *testing.F) {
	fuzzDecode(f, DecodeRTTRow, func(v *RTTRow) []byte { return v.canonical() })
}

func FuzzDecodeModel(f *testing.F) {
	fuzzDecode(f, DecodeModel, func(v *Model) []byte { return v.canonical() })
}

func FuzzDecodeParams(f *testing.F) {
	fuzzDecode(f, DecodeParams, func(v *Params) []byte { return v.canonical() })
}

func FuzzDecodeInputs(f *testing.F) {
	fuzzDecode(f, DecodeInputs, func(v *Inputs) []byte { h := v.Hash(); return h[:] })
}

func FuzzDecodePlan(f *testing.F) {
	fuzzDecode(f, func(b []byte) (PlanDoc, error) {
		p, err := DecodePlan(b)
		return PlanDoc{Hash: p.Hash(), Plan: p}, err
	}, func(v *PlanDoc) []byte { return v.Plan.canonical() })
}

func FuzzDecodeAcceptance(f *testing.F) {
	fuzzDecode(f, DecodeAcceptance, func(v *Acceptance) []byte { return v.canonical() })
}

func FuzzDecodeManifest(f *testing.F) {
	fuzzDecode(f, DecodeManifest, func(v *Manifest) []byte { return v.canonical() })
}

func FuzzDecodeJob(f *testing.F) {
	fuzzDecode(f, DecodeJob, func(v *Job) []byte { return v.canonical() })
}

func FuzzDecodeReceipt(f *testing.F) {
	fuzzDecode(f, DecodeReceipt, func(v *Receipt) []byte { return v.canonical() })
}

func FuzzDecodeReceipts(f *testing.F) {
	fuzzDecode(f, DecodeReceipts, func(v *[]Receipt) []byte {
		var b []byte
		for i := range *v {
			b = append(b, (*v)[i].canonical()...)
		}
		return b
	})
}

// TestValidSeedsDecode: each fuzz target's "valid" seed is accepted, so
// fuzzing starts from the success path as well as the rejections.
func TestValidSeedsDecode(t *testing.T) {
	decoders := map[string]func([]byte) error{
		"capability": func(b []byte) error { _, err := DecodeCapability(b); return err },
		"rtt_row":    func(b []byte) error { _, err := DecodeRTTRow(b); return err },
		"model":      func(b []byte) error { _, err := DecodeModel(b); return err },
		"params":     func(b []byte) error { _, err := DecodeParams(b); return err },
		"inputs":     func(b []byte) error { _, err := DecodeInputs(b); return err },
		"plan":       func(b []byte) error { _, err := DecodePlan(b); return err },
		"acceptance": func(b []byte) error { _, err := DecodeAcceptance(b); return err },
		"manifest":   func(b []byte) error { _, err := DecodeManifest(b); return err },
		"job": func(b []byte) error {
			if _, err := ParseJob(b); err != nil {
				return err
			}
			_, err := DecodeJob(b)
			return err
		},
		"receipt":  func(b []byte) error { _, err := DecodeReceipt(b); return err },
		"receipts": func(b []byte) error { _, err := DecodeReceipts(b); return err },
	}
	for _, s := range samples(t) {
		b, _ := json.Marshal(s.value)
		if err := decoders[s.name](b); err != nil {
			t.Errorf("%s: golden sample rejected: %v", s.name, err)
		}
		bad := bytes.Replace(b, []byte(`"time_ms":1`), []byte(`"time_ms":2`), 1)
		if !bytes.Equal(bad, b) && s.name != "inputs" && s.name != "receipts" {
			if err := decoders[s.name](bad); err == nil {
				t.Errorf("%s: altered sample accepted", s.name)
			}
		}
	}
}

func FuzzParseJob(f *testing.F) {
	fuzzDecode(f, ParseJob, func(v *Job) []byte { return v.canonical() })
}
