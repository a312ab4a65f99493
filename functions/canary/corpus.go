package canary

import (
	"fmt"
	"strings"
)

// Prompt is one canary question. Answers, when set, are the known answers
// (any one, case-insensitive, as a word of the reply) a model that can
// answer must give; without them the reply is judged by comparison with
// another worker's reply to the same prompt.
type Prompt struct {
	System  string
	User    string
	Answers []string
}

// knownAnswer are questions any chat model that is what it claims to be
// answers right, asked as users ask them.
var knownAnswer = []Prompt{
	{User: "What is the capital of France? Answer with one word.", Answers: []string{"paris"}},
	{User: "What is 7 times 8? Reply with just the number.", Answers: []string{"56", "fifty-six"}},
	{User: "Which planet is known as the Red Planet?", Answers: []string{"mars"}},
	{User: "What is the chemical symbol for gold?", Answers: []string{"au"}},
	{User: "How many days are in a week? Just the number, please.", Answers: []string{"7", "seven"}},
	{User: "What is the opposite of 'hot'? One word.", Answers: []string{"cold"}},
	{User: "Who wrote 'Romeo and Juliet'?", Answers: []string{"shakespeare"}},
	{User: "What is the largest ocean on Earth?", Answers: []string{"pacific"}},
	{User: "What gas do plants absorb from the air for photosynthesis?", Answers: []string{"co2", "carbon dioxide", "dioxide"}},
	{User: "What is 100 divided by 4? Only the number.", Answers: []string{"25", "twenty-five"}},
	{User: "In which continent is Kenya?", Answers: []string{"africa"}},
	{User: "What color do you get by mixing blue and yellow?", Answers: []string{"green"}},
	{User: "What is the freezing point of water in Celsius? Number only.", Answers: []string{"0", "zero"}},
	{User: "What is the square root of 81?", Answers: []string{"9", "nine"}},
	{User: "Which language is primarily spoken in Brazil?", Answers: []string{"portuguese"}},
	{User: "How many legs does a spider have?", Answers: []string{"8", "eight"}},
}

// openEnded are ordinary requests of the kinds users send, for comparing
// greedy replies across workers of one model.
var openEnded = func() []Prompt {
	tasks := []string{
		"Write two sentences about %s.",
		"Explain %s to a ten-year-old in a short paragraph.",
		"Give me three quick facts about %s.",
		"Write a haiku about %s.",
		"Summarize the history of %s in a few sentences.",
		"What are the pros and cons of %s? Keep it brief.",
		"Draft a friendly one-paragraph email inviting a colleague to talk about %s.",
		"List a few common misconceptions about %s.",
	}
	topics := []string{"the moon", "coffee", "bicycles", "volcanoes", "the printing press", "honeybees",
		"rainforests", "public libraries"}
	var out []Prompt
	for i, t := range tasks {
		for j, topic := range topics {
			p := Prompt{User: fmt.Sprintf(t, topic)}
			if (i+j)%3 == 0 {
				p.System = "You are a helpful assistant."
			}
			out = append(out, p)
		}
	}
	return out
}()

// answered reports whether reply gives one of the known answers, as a
// whole word (or phrase) in any case.
func answered(reply string, answers []string) bool {
	text := " " + strings.Join(words(reply), " ") + " "
	for _, a := range answers {
		if strings.Contains(text, " "+strings.Join(words(a), " ")+" ") {
			return true
		}
	}
	return false
}

// knows judges a known-answer canary's reply: the answer in the content,
// or, when a thinking model spent its tokens reasoning, in the reasoning;
// and not among the answers to other questions (a reply stuffed with every
// answer knows none).
func knows(question int, a answer) bool {
	want := knownAnswer[question].Answers
	if a.text != "" {
		return answered(a.text, want) && others(question, a.text) < 2
	}
	return answered(a.reasoning, want) && others(question, a.reasoning) < 4
}

// others counts the other questions whose answer the text gives.
func others(question int, text string) int {
	n := 0
	for i, p := range knownAnswer {
		if i != question && answered(text, p.Answers) {
			n++
		}
	}
	return n
}
