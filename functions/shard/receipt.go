package shard

import (
	"crypto/ed25519"
	"fmt"
)

// Job is the coordinator's record of one sharded job: the ring it ran on,
// its freshness nonce, the token positions served, the activation hashes
// the coordinator sent into and got back from the ring, the Solana slot it
// started at and what the stages earn for it. Signed by the coordinator.
type Job struct {
	ID    string `json:"id" validate:"required,max=128,printascii"`
	Plan  Hash   `json:"plan"`
	Model Hash   `json:"model"`
	// Nonce is fresh random bytes per job attempt: receipts from another
	// attempt cannot be replayed into this one.
	Nonce Hash `json:"nonce"`
	// Input is the hash of what the coordinator sent stage 0; Output of
	// what it received from the last stage.
	Input      Hash  `json:"input"`
	Output     Hash  `json:"output"`
	TokenStart int64 `json:"token_start" validate:"gte=0"`
	TokenEnd   int64 `json:"token_end" validate:"gtfield=TokenStart"`
	// Slot is a Solana slot the coordinator saw when the job started.
	Slot uint64 `json:"slot"`
	Time int64  `json:"time_ms" validate:"gt=0"`
	// Earnings is what the stages share, in integer currency units.
	Earnings    int64     `json:"earnings" validate:"gte=0"`
	Coordinator PublicKey `json:"coordinator"`
	Sig         Signature `json:"sig"`
}

func (j *Job) canonical() []byte {
	e := newEnc(domainJob)
	e.str(j.ID)
	e.raw32(j.Plan)
	e.raw32(j.Model)
	e.raw32(j.Nonce)
	e.raw32(j.Input)
	e.raw32(j.Output)
	e.i64(j.TokenStart)
	e.i64(j.TokenEnd)
	e.u64(j.Slot)
	e.i64(j.Time)
	e.i64(j.Earnings)
	e.raw32(j.Coordinator)
	return e.b
}
func (j *Job) signer() PublicKey    { return j.Coordinator }
func (j *Job) signature() Signature { return j.Sig }

// Sign sets Coordinator to key's public key and signs the job.
func (j *Job) Sign(key ed25519.PrivateKey) {
	j.Coordinator = KeyOf(key)
	j.Sig = sign(key, j.canonical())
}

// validFields checks the fields only.
func (j *Job) validFields() error {
	if err := validate.Struct(j); err != nil {
		return fmt.Errorf("%w: job: %v", ErrInvalid, err)
	}
	if j.Coordinator.IsZero() {
		return fmt.Errorf("%w: job: coordinator missing", ErrInvalid)
	}
	return nil
}

// Check validates the fields and the signature.
func (j *Job) Check() error {
	if err := j.validFields(); err != nil {
		return err
	}
	return verifySig(j, "job")
}

// DecodeJob parses a job record and checks it.
func DecodeJob(b []byte) (Job, error) {
	var j Job
	if err := decodeJSON(b, MaxRecordBytes, &j, "job"); err != nil {
		return Job{}, err
	}
	return j, j.Check()
}

// Receipt is one stage's signed account of its work on a job: which layers
// it ran over which token positions, the hashes of the activations it took
// in and sent on (the chain), the job's nonce, and a recent Solana block
// that dates it.
type Receipt struct {
	Job        string    `json:"job" validate:"required,max=128,printascii"`
	Plan       Hash      `json:"plan"`
	Stage      int       `json:"stage" validate:"gte=0,lte=65536"`
	LayerStart int       `json:"layer_start" validate:"gte=0,lte=65536"`
	LayerEnd   int       `json:"layer_end" validate:"gtfield=LayerStart,lte=65536"`
	Model      Hash      `json:"model"`
	Input      Hash      `json:"input"`
	Output     Hash      `json:"output"`
	TokenStart int64     `json:"token_start" validate:"gte=0"`
	TokenEnd   int64     `json:"token_end" validate:"gtfield=TokenStart"`
	Nonce      Hash      `json:"nonce"`
	Slot       uint64    `json:"slot"`
	Blockhash  Blockhash `json:"blockhash"`
	Time       int64     `json:"time_ms" validate:"gt=0"`
	Signer     PublicKey `json:"signer"`
	Sig        Signature `json:"sig"`
}

func (r *Receipt) canonical() []byte {
	e := newEnc(domainReceipt)
	e.str(r.Job)
	e.raw32(r.Plan)
	e.int(r.Stage)
	e.int(r.LayerStart)
	e.int(r.LayerEnd)
	e.raw32(r.Model)
	e.raw32(r.Input)
	e.raw32(r.Output)
	e.i64(r.TokenStart)
	e.i64(r.TokenEnd)
	e.raw32(r.Nonce)
	e.u64(r.Slot)
	e.raw32(r.Blockhash)
	e.i64(r.Time)
	e.raw32(r.Signer)
	return e.b
}
func (r *Receipt) signer() PublicKey    { return r.Signer }
func (r *Receipt) signature() Signature { return r.Sig }

// Sign sets Signer to key's public key and signs the receipt.
func (r *Receipt) Sign(key ed25519.PrivateKey) {
	r.Signer = KeyOf(key)
	r.Sig = sign(key, r.canonical())
}

func (r *Receipt) validFields() error {
	if err := validate.Struct(r); err != nil {
		return fmt.Errorf("%w: receipt: %v", ErrInvalid, err)
	}
	if r.Signer.IsZero() {
		return fmt.Errorf("%w: receipt: signer missing", ErrInvalid)
	}
	return nil
}

// Check validates the fields and the signature.
func (r *Receipt) Check() error {
	if err := r.validFields(); err != nil {
		return err
	}
	return verifySig(r, "receipt")
}

// DecodeReceipt parses one receipt and checks it.
func DecodeReceipt(b []byte) (Receipt, error) {
	var r Receipt
	if err := decodeJSON(b, MaxRecordBytes, &r, "receipt"); err != nil {
		return Receipt{}, err
	}
	return r, r.Check()
}

// DecodeReceipts parses a JSON array of receipts. It checks their fields
// but not their signatures: Verify does, so a forged receipt is a verdict
// (nobody is paid) rather than a parse error.
func DecodeReceipts(b []byte) ([]Receipt, error) {
	var rs []Receipt
	if err := decodeJSON(b, MaxInputsBytes, &rs, "receipts"); err != nil {
		return nil, err
	}
	if len(rs) > 65536 {
		return nil, fmt.Errorf("%w: %d receipts", ErrInvalid, len(rs))
	}
	for i := range rs {
		if err := rs[i].validFields(); err != nil {
			return nil, fmt.Errorf("receipt %d: %w", i, err)
		}
	}
	return rs, nil
}

// ParseJob parses a job record and checks its fields but not its
// signature: Verify judges that, so a forged job is a verdict (nobody is
// paid) rather than a parse error.
func ParseJob(b []byte) (Job, error) {
	var j Job
	if err := decodeJSON(b, MaxRecordBytes, &j, "job"); err != nil {
		return Job{}, err
	}
	return j, j.validFields()
}
