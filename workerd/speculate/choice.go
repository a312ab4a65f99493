package speculate

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of a --draft value's parts.
const (
	// MaxModelName is the longest model name an entry may name, in
	// bytes: far above real names (the gateway's are short slugs), low
	// enough to keep a typo'd blob of text out of logs.
	MaxModelName = 128
	// maxPath is the longest draft model path, in bytes: Linux's PATH_MAX.
	maxPath = 4096
)

// choiceForm is the form every ParseChoice error restates.
const choiceForm = "want SPEC or MODEL=SPEC, comma-separated, SPEC being lookup, none or the path of a GGUF draft model sharing the ring model's vocabulary (at most one SPEC without MODEL=: the default)"

// ParseChoice parses the value of workerd's --draft flag: comma-separated
// entries, each SPEC (the default, for ring models no entry names) or
// MODEL=SPEC (for ring model MODEL). SPEC is lookup (n-gram lookup in the
// request's prediction and the reply so far: NewLookup), none (no
// drafting), or the path of a GGUF draft model (ModeModel; it is not
// opened here). An empty value (or one of spaces) means lookup for every
// model. Space around entries, names and specs is ignored.
//
// An entry is split at its first "=", so a path may hold an "=" only
// after MODEL= (a default path with one reads as MODEL=SPEC), and no path
// may hold a ",": reach such a file through a link.
func ParseChoice(s string) (Choice, error) {
	c := Choice{Default: Spec{Mode: ModeLookup}}
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	hasDefault := false
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return Choice{}, fmt.Errorf("entry %d is empty: %s", i+1, choiceForm)
		}
		model, spec, named := strings.Cut(entry, "=")
		model, spec = strings.TrimSpace(model), strings.TrimSpace(spec)
		if !named {
			spec = model
		}
		if named {
			if err := checkModelName(model); err != nil {
				return Choice{}, fmt.Errorf("entry %d: %w: %s", i+1, err, choiceForm)
			}
		}
		if spec == "" {
			return Choice{}, fmt.Errorf("entry %d (%q) has no SPEC after the \"=\": %s", i+1, entry, choiceForm)
		}
		sp, err := parseSpec(spec)
		if err != nil {
			return Choice{}, fmt.Errorf("entry %d: %w: %s", i+1, err, choiceForm)
		}
		if !named {
			if hasDefault {
				return Choice{}, fmt.Errorf("entry %d (%q) is a second default (a SPEC without MODEL=): %s", i+1, entry, choiceForm)
			}
			c.Default, hasDefault = sp, true
			continue
		}
		if _, dup := c.PerModel[model]; dup {
			return Choice{}, fmt.Errorf("entry %d names model %q a second time: %s", i+1, model, choiceForm)
		}
		if c.PerModel == nil {
			c.PerModel = make(map[string]Spec)
		}
		c.PerModel[model] = sp
	}
	return c, nil
}

// checkModelName refuses names a ring model cannot have.
func checkModelName(m string) error {
	switch {
	case m == "":
		return fmt.Errorf("no MODEL before the \"=\"")
	case len(m) > MaxModelName:
		return fmt.Errorf("model name of %d bytes, longer than %d", len(m), MaxModelName)
	case !utf8.ValidString(m):
		return fmt.Errorf("model name %q is not UTF-8", m)
	}
	for _, r := range m {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("model name %q holds a space or a character that does not print", m)
		}
	}
	return nil
}

func parseSpec(s string) (Spec, error) {
	switch s {
	case ModeLookup:
		return Spec{Mode: ModeLookup}, nil
	case ModeNone:
		return Spec{Mode: ModeNone}, nil
	}
	if len(s) > maxPath {
		return Spec{}, fmt.Errorf("draft model path of %d bytes, longer than %d", len(s), maxPath)
	}
	if !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return Spec{}, fmt.Errorf("draft model path %q holds a control character or invalid UTF-8", s)
	}
	return Spec{Mode: ModeModel, Path: s}, nil
}
