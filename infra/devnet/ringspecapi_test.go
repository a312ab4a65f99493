package devnet_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/config"
)

// TestRingSpeculationThroughTheAPI: a ring of three workerd processes whose
// members draft with a draft model (the target file itself, so every draft
// is accepted) serves, through the gateway and the OpenAI Go SDK, replies
// equal to the whole model's, reporting the drafts in
// usage.completion_tokens_details, non-streamed and streamed; with the
// header C0mpute-Speculation: off it drafts nothing and says so; a
// prediction drafts even for a member told to draft nothing; a bad header
// value is a 400 that charges nothing.
func TestRingSpeculationThroughTheAPI(t *testing.T) {
	bin := buildWorkerd(t)
	o := testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 4, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}
	model := "ring-spec"
	cm, path := publishRing(t, model, o, 3)
	e := newEnv(t, envOptions{credits: 10_000, models: []catalog.Model{cm}, rings: ringTimeouts})
	for i := range 3 {
		// The members draft with the target itself for this model and
		// nothing for any other.
		e.startMember(t, bin, i, config.EnvDraft+"=none,"+model+"="+path)
	}
	e.waitRing(model, 3)
	whole, err := builtin.New(path, builtin.WithModelID(model), builtin.WithLogger(testLog(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	c := ringCases()[0]
	params, req := c.request(model)
	want, wantUsage, _ := wholeReply(t, whole, model, req)
	chat := func(what string, params openai.ChatCompletionNewParams, opts ...option.RequestOption) *openai.ChatCompletion {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := e.client.Chat.Completions.New(ctx, params, opts...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := resp.Choices[0].Message.Content; got != want || resp.Usage.CompletionTokens != wantUsage.CompletionTokens {
			t.Fatalf("%s: the ring said %q (%d tokens), the whole model %q (%d)", what, got, resp.Usage.CompletionTokens, want, wantUsage.CompletionTokens)
		}
		return resp
	}
	charged := int64(0)
	on := chat("speculating", params)
	charged++
	d := on.Usage.CompletionTokensDetails
	if !d.JSON.AcceptedPredictionTokens.Valid() || d.AcceptedPredictionTokens == 0 || d.RejectedPredictionTokens != 0 ||
		d.AcceptedPredictionTokens > on.Usage.CompletionTokens {
		t.Fatalf("drafting with the target itself: %d accepted, %d rejected of %d tokens", d.AcceptedPredictionTokens, d.RejectedPredictionTokens, on.Usage.CompletionTokens)
	}
	t.Logf("speculating: %d of %d tokens were accepted drafts", d.AcceptedPredictionTokens, on.Usage.CompletionTokens)

	off := chat("speculation off", params, option.WithHeader("C0mpute-Speculation", "off"))
	charged++
	if d := off.Usage.CompletionTokensDetails; !d.JSON.AcceptedPredictionTokens.Valid() || d.AcceptedPredictionTokens != 0 || d.RejectedPredictionTokens != 0 {
		t.Fatalf("speculation off: %d accepted, %d rejected", d.AcceptedPredictionTokens, d.RejectedPredictionTokens)
	}

	// Streamed, with the usage chunk.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	sp := params
	sp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := e.client.Chat.Completions.NewStreaming(ctx, sp)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	err = stream.Err()
	cancel()
	if err != nil {
		t.Fatalf("streamed: %v", err)
	}
	charged++
	if got := acc.Choices[0].Message.Content; got != want || acc.Usage.CompletionTokensDetails.AcceptedPredictionTokens == 0 {
		t.Fatalf("streamed: %q with %d drafts accepted, want %q and some", got, acc.Usage.CompletionTokensDetails.AcceptedPredictionTokens, want)
	}

	// A bad header value: refused before anything is charged.
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	_, err = e.client.Chat.Completions.New(ctx, params, option.WithHeader("C0mpute-Speculation", "sometimes"))
	cancel()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "C0mpute-Speculation" {
		t.Fatalf("a bad header value: %v, want a 400 naming the header", err)
	}
	if got := e.balance().Credits; got != 10_000-charged*cm.Price {
		t.Fatalf("%d credits after %d jobs of %d", got, charged, cm.Price)
	}
}

// TestRingPredictionThroughTheAPI: members told to draft nothing still
// draft from a request's prediction (OpenAI's Predicted Outputs): the
// reply is the whole model's, and usage counts the prediction's tokens
// the reply took.
func TestRingPredictionThroughTheAPI(t *testing.T) {
	bin := buildWorkerd(t)
	o := testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 4, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}
	model := "ring-predict"
	cm, path := publishRing(t, model, o, 2)
	e := newEnv(t, envOptions{credits: 10_000, models: []catalog.Model{cm}, rings: ringTimeouts})
	for i := range 2 {
		e.startMember(t, bin, i, config.EnvDraft+"=none")
	}
	e.waitRing(model, 2)
	whole, err := builtin.New(path, builtin.WithModelID(model), builtin.WithLogger(testLog(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	params, req := ringCases()[1].request(model)
	want, _, _ := wholeReply(t, whole, model, req)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := e.client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.Usage.CompletionTokensDetails; resp.Choices[0].Message.Content != want || d.AcceptedPredictionTokens != 0 || d.RejectedPredictionTokens != 0 {
		t.Fatalf("no drafter, no prediction: %q, %d accepted, %d rejected", resp.Choices[0].Message.Content, d.AcceptedPredictionTokens, d.RejectedPredictionTokens)
	}
	params.Prediction = openai.ChatCompletionPredictionContentParam{Content: openai.ChatCompletionPredictionContentContentUnionParam{OfString: openai.String(want)}}
	resp, err = e.client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	d := resp.Usage.CompletionTokensDetails
	if resp.Choices[0].Message.Content != want || d.AcceptedPredictionTokens == 0 {
		t.Fatalf("with the reply as its prediction: %q, %d accepted, %d rejected", resp.Choices[0].Message.Content, d.AcceptedPredictionTokens, d.RejectedPredictionTokens)
	}
	t.Logf("with the reply as its prediction: %d of %d tokens accepted, %d rejected", d.AcceptedPredictionTokens, resp.Usage.CompletionTokens, d.RejectedPredictionTokens)
}
