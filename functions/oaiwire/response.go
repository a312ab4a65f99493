package oaiwire

// Usage is a reply's token counts.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	// CompletionTokensDetails breaks the completion tokens down; set for
	// ring models, which draft tokens and verify them (speculative
	// decoding).
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// CompletionTokensDetails are OpenAI's completion_tokens_details, as far
// as c0mpute reports them: of the tokens drafted for the reply (from a
// draft model, the context, or the request's prediction), how many the
// model accepted and how many it rejected.
type CompletionTokensDetails struct {
	AcceptedPredictionTokens int64 `json:"accepted_prediction_tokens"`
	RejectedPredictionTokens int64 `json:"rejected_prediction_tokens"`
}

// Delta is one streamed increment of the assistant message. Workers send
// deltas to the gateway; the gateway wraps them in chunks.
type Delta struct {
	Role      string     `json:"role,omitempty"`
	Content   string     `json:"content,omitempty"`
	Reasoning string     `json:"reasoning_content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Empty reports whether the delta carries nothing.
func (d Delta) Empty() bool {
	return d.Role == "" && d.Content == "" && d.Reasoning == "" && len(d.ToolCalls) == 0
}

// Chunk is a chat.completion.chunk event.
type Chunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint,omitempty"`
	Choices           []ChunkChoice `json:"choices"`
	// Usage is null on every chunk of a stream that asked for usage, and
	// set on the one final chunk; it is absent otherwise.
	Usage *Usage `json:"usage,omitempty"`
}

// ChunkChoice is a chunk's one choice.
type ChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// Completion is a non-streamed chat.completion.
type Completion struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint,omitempty"`
	Choices           []Choice `json:"choices"`
	Usage             Usage    `json:"usage"`
}

// Choice is a completion's one choice.
type Choice struct {
	Index        int             `json:"index"`
	Message      ResponseMessage `json:"message"`
	Logprobs     any             `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// ResponseMessage is the assistant's reply. Content is null when the reply
// is only tool calls, as OpenAI sends it.
type ResponseMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Reasoning string     `json:"reasoning_content,omitempty"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Finish reasons.
const (
	FinishStop      = "stop"
	FinishLength    = "length"
	FinishToolCalls = "tool_calls"
)
