package backends

import flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"

// ChunkBox is a chat completion chunk with one choice and its delta,
// allocated together: a translated stream's decoder makes one per chunk
// it emits (one allocation, where the four messages would take four).
// Chunk is the chunk to return; Delta is its only choice's delta, and
// Text the content the delta may point to (Delta.Content = &box.Text).
type ChunkBox struct {
	Chunk   flexwayv1.ChatCompletionChunk
	Choice  flexwayv1.ChatCompletionChunkChoice
	choices [1]*flexwayv1.ChatCompletionChunkChoice
	Delta   flexwayv1.ChatMessage
	Text    flexwayv1.ChatMessage_Text
}

// NewChunkBox returns a chunk (object chat.completion.chunk) of id, model
// and created (Unix seconds) with one choice of index and an empty delta.
func NewChunkBox(id, model string, created int64, index int32) *ChunkBox {
	b := &ChunkBox{}
	b.Chunk.Id, b.Chunk.Object, b.Chunk.Created, b.Chunk.Model = id, "chat.completion.chunk", created, model
	b.Choice.Index, b.Choice.Delta = index, &b.Delta
	b.choices[0] = &b.Choice
	b.Chunk.Choices = b.choices[:]
	return b
}
