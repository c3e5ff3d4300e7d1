package openaiwire

import (
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// message parses a ChatMessage object at d.pos: a request message when
// strict (role required, parts "text", "image_url" or "refusal" only), a
// response message or delta otherwise.
func (d *decoder) message(strict bool) (*flexwayv1.ChatMessage, error) {
	m := &flexwayv1.ChatMessage{}
	hasRole := false
	err := d.members(func(key []byte) (err error) {
		switch string(key) {
		case "role":
			if !strict && d.peek() == 'n' {
				m.Role = ""
				return d.literal("null")
			}
			m.Role, err = d.str()
			hasRole = true
		case "content":
			err = d.content(m, strict)
		case "name":
			m.Name, err = nullable(d, &m.ExtraFields, "name", d.strPtr)
		default:
			err = d.extra(&m.ExtraFields, key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if strict && (!hasRole || m.Role == "") {
		if !hasRole {
			return nil, fieldErr("role", "a message needs a role")
		}
		return nil, fieldErr("role", "the role of a message must not be empty")
	}
	return m, nil
}

// content parses a message's content at d.pos into m.
func (d *decoder) content(m *flexwayv1.ChatMessage, strict bool) error {
	switch d.peek() {
	case 'n':
		if err := d.literal("null"); err != nil {
			return err
		}
		m.Content = &flexwayv1.ChatMessage_Null{Null: structpb.NullValue_NULL_VALUE}
		return nil
	case '"':
		s, err := d.str()
		if err != nil {
			return err
		}
		m.Content = &flexwayv1.ChatMessage_Text{Text: s}
		return nil
	case '[':
		parts := &flexwayv1.ContentParts{}
		err := d.elements(func(int) error {
			p, err := d.contentPart(strict)
			if err == nil {
				parts.Parts = append(parts.Parts, p)
			}
			return err
		})
		if err != nil {
			return err
		}
		m.Content = &flexwayv1.ChatMessage_Parts{Parts: parts}
		return nil
	}
	return d.typeErr("a string, an array of content parts, or null")
}

// contentPart parses one content part at d.pos. Strict parsing refuses
// every type but "text", "image_url" and "refusal" (an assistant's refusal
// replayed, whose `refusal` member, a string, is kept raw in extra_fields
// like any member Flexway does not model); lenient parsing keeps an unknown
// type with its members in extra_fields.
func (d *decoder) contentPart(strict bool) (*flexwayv1.ContentPart, error) {
	p := &flexwayv1.ContentPart{}
	hasType := false
	err := d.members(func(key []byte) (err error) {
		switch string(key) {
		case "type":
			p.Type, err = d.str()
			hasType = true
		case "text":
			p.Text, err = nullable(d, &p.ExtraFields, "text", d.strPtr)
		case "image_url":
			p.ImageUrl, err = nullable(d, &p.ExtraFields, "image_url", d.imageURL)
		default:
			err = d.extra(&p.ExtraFields, key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	switch {
	case !hasType:
		return nil, fieldErr("type", "a content part needs a type")
	case p.Type == "text":
		if p.Text == nil {
			return nil, fieldErr("text", "a text content part needs a string text")
		}
	case p.Type == "image_url":
		if p.ImageUrl == nil {
			return nil, fieldErr("image_url", "an image_url content part needs an image_url object with a url")
		}
	case p.Type == "refusal":
		// The raw text starts at the value's first byte: a string starts
		// with its quote.
		if r := p.ExtraFields["refusal"]; strict && !strings.HasPrefix(r, `"`) {
			return nil, fieldErr("refusal", "a refusal content part needs a string refusal")
		}
	case strict:
		return nil, fieldErr("type", "content part type %q is not supported; use \"text\", \"image_url\" or \"refusal\"", p.Type)
	}
	return p, nil
}

// imageURL parses an image_url object at d.pos; its url is required.
func (d *decoder) imageURL() (*flexwayv1.ImageUrl, error) {
	u := &flexwayv1.ImageUrl{}
	hasURL := false
	err := d.members(func(key []byte) (err error) {
		switch string(key) {
		case "url":
			u.Url, err = d.str()
			hasURL = true
		case "detail":
			u.Detail, err = nullable(d, &u.ExtraFields, "detail", d.strPtr)
		default:
			err = d.extra(&u.ExtraFields, key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !hasURL {
		return nil, fieldErr("url", "an image_url object needs a string url")
	}
	return u, nil
}

// appendMessage writes m as a JSON object: role (when not empty), content
// (when set), name (when set), then its extra fields.
func appendMessage(dst []byte, m *flexwayv1.ChatMessage, strict bool) ([]byte, error) {
	if m == nil {
		m = &flexwayv1.ChatMessage{}
	}
	o := open(dst)
	if m.GetRole() != "" {
		o.str("role", m.GetRole())
	}
	// The getters, not the oneof wrappers, read the values: a wrapper may be
	// a nil pointer.
	switch m.GetContent().(type) {
	case *flexwayv1.ChatMessage_Text:
		o.str("content", m.GetText())
	case *flexwayv1.ChatMessage_Null:
		o.null("content")
	case *flexwayv1.ChatMessage_Parts:
		o.key("content")
		o.dst = append(o.dst, '[')
		for i, p := range m.GetParts().GetParts() {
			if i > 0 {
				o.dst = append(o.dst, ',')
			}
			var err error
			if o.dst, err = appendContentPart(o.dst, p, strict); err != nil {
				return nil, nestKey(nestIndex(err, i), "content")
			}
		}
		o.dst = append(o.dst, ']')
	}
	if m.Name != nil {
		o.str("name", *m.Name)
	}
	err := o.extras(m.GetExtraFields(), func(k string) bool {
		switch k {
		case "role":
			return m.GetRole() != ""
		case "content":
			return m.GetContent() != nil
		case "name":
			return m.Name != nil
		}
		return false
	}, strict)
	return o.close(), err
}

// appendContentPart writes one content part: type, text, image_url, then
// its extra fields.
func appendContentPart(dst []byte, p *flexwayv1.ContentPart, strict bool) ([]byte, error) {
	if p == nil {
		p = &flexwayv1.ContentPart{}
	}
	o := open(dst)
	o.str("type", p.GetType())
	if p.Text != nil {
		o.str("text", *p.Text)
	}
	if u := p.GetImageUrl(); u != nil {
		o.key("image_url")
		var err error
		if o.dst, err = appendImageURL(o.dst, u, strict); err != nil {
			return nil, nestKey(err, "image_url")
		}
	}
	err := o.extras(p.GetExtraFields(), func(k string) bool {
		switch k {
		case "type":
			return true
		case "text":
			return p.Text != nil
		case "image_url":
			return p.GetImageUrl() != nil
		}
		return false
	}, strict)
	return o.close(), err
}

// appendImageURL writes an image_url object: url, detail, then its extra
// fields.
func appendImageURL(dst []byte, u *flexwayv1.ImageUrl, strict bool) ([]byte, error) {
	o := open(dst)
	o.str("url", u.GetUrl())
	if u.Detail != nil {
		o.str("detail", *u.Detail)
	}
	err := o.extras(u.GetExtraFields(), func(k string) bool {
		return k == "url" || k == "detail" && u.Detail != nil
	}, strict)
	return o.close(), err
}
