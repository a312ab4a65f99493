package gguf

import "fmt"

// Type is a ggml tensor element type, as GGUF numbers them.
type Type uint32

// Tensor types. The engine computes with F32, F16, Q8_0, Q4_K and Q6_K;
// the others are known so a file that holds them parses and is refused
// with a clear message.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q8_1 Type = 9
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	BF16 Type = 30
)

type typeInfo struct {
	name       string
	blockElems uint64
	blockBytes uint64
}

var types = map[Type]typeInfo{
	F32:  {"F32", 1, 4},
	F16:  {"F16", 1, 2},
	Q4_0: {"Q4_0", 32, 18},
	Q4_1: {"Q4_1", 32, 20},
	Q5_0: {"Q5_0", 32, 22},
	Q5_1: {"Q5_1", 32, 24},
	Q8_0: {"Q8_0", 32, 34},
	Q8_1: {"Q8_1", 32, 36},
	Q2_K: {"Q2_K", 256, 84},
	Q3_K: {"Q3_K", 256, 110},
	Q4_K: {"Q4_K", 256, 144},
	Q5_K: {"Q5_K", 256, 176},
	Q6_K: {"Q6_K", 256, 210},
	Q8_K: {"Q8_K", 256, 292},
	BF16: {"BF16", 1, 2},
}

// String is the type's ggml name.
func (t Type) String() string {
	if i, ok := types[t]; ok {
		return i.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockElems is the number of elements in one block (1 for float types).
func (t Type) BlockElems() int { return int(types[t].blockElems) }

// BlockBytes is the encoded size of one block.
func (t Type) BlockBytes() int { return int(types[t].blockBytes) }

// RowBytes is the encoded size of a row of n elements; n must be a
// multiple of BlockElems.
func (t Type) RowBytes(n int) int {
	i := types[t]
	return n / int(i.blockElems) * int(i.blockBytes)
}

// size checks dims against the type's block size and returns the data
// size, refusing products that overflow.
func (t Type) size(dims []uint64) (uint64, error) {
	info, ok := types[t]
	if !ok {
		return 0, fmt.Errorf("%w: unknown tensor type %d", ErrFormat, uint32(t))
	}
	if dims[0]%info.blockElems != 0 {
		return 0, fmt.Errorf("%w: row of %d elements is not a multiple of %s's block of %d", ErrFormat, dims[0], info.name, info.blockElems)
	}
	const limit = 1 << 48
	n := uint64(1)
	for _, d := range dims {
		if d == 0 || d > limit || n > limit/d {
			return 0, fmt.Errorf("%w: dimensions %v", ErrFormat, dims)
		}
		n *= d
	}
	return n / info.blockElems * info.blockBytes, nil
}
