package enginestub

import (
	"encoding/json"
	"fmt"
	"strings"
)

// chatRequest is the part of an OpenAI chat request the stand-in reads.
type chatRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	MaxTokens     *int   `json:"max_tokens"`
	MaxCompletion *int   `json:"max_completion_tokens"`
	NPredict      *int   `json:"n_predict"` // llama.cpp's own name; wins over max_tokens
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// messagesRequest is the part of an Anthropic Messages request it reads.
type messagesRequest struct {
	Model     string          `json:"model"`
	Stream    bool            `json:"stream"`
	MaxTokens *int            `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

type turn struct{ role, content string }

// text flattens a content field: a string, or an array of parts whose "text" is
// taken (other parts, e.g. tool_use, are included as their JSON so they still
// count as prompt bytes).
func text(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor an array: %w", err)
	}
	var b strings.Builder
	for _, p := range parts {
		var t struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(p, &t) == nil && t.Type == "text" {
			b.WriteString(t.Text)
		} else {
			b.Write(p)
		}
	}
	return b.String(), nil
}

// render applies the recorded server's chat template (recorded/llamacpp/props.txt
// chat_template): "<|im_start|>role\ncontent<|im_end|>\n" per message, then
// "<|im_start|>assistant\n". The same rendering serves SGLang's stand-in.
func render(turns []turn) []byte {
	var b strings.Builder
	for _, t := range turns {
		b.WriteString("<|im_start|>" + t.role + "\n" + t.content + "<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return []byte(b.String())
}

func (r *chatRequest) prompt() ([]byte, error) {
	var turns []turn
	for _, m := range r.Messages {
		c, err := text(m.Content)
		if err != nil {
			return nil, err
		}
		turns = append(turns, turn{m.Role, c})
	}
	return render(turns), nil
}

func (r *chatRequest) maxTokens() (int, bool) {
	switch {
	case r.NPredict != nil && *r.NPredict >= 0:
		return *r.NPredict, true
	case r.MaxCompletion != nil:
		return *r.MaxCompletion, true
	case r.MaxTokens != nil:
		return *r.MaxTokens, true
	}
	return DefaultMaxTokens, false
}

func (r *messagesRequest) prompt() ([]byte, error) {
	var turns []turn
	sys, err := text(r.System)
	if err != nil {
		return nil, err
	}
	if sys != "" {
		turns = append(turns, turn{"system", sys})
	}
	for _, m := range r.Messages {
		c, err := text(m.Content)
		if err != nil {
			return nil, err
		}
		turns = append(turns, turn{m.Role, c})
	}
	return render(turns), nil
}

// commonPrefix is the length of the common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
