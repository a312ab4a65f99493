//go:build !amd64

package quant

func blockDotsQ8_0(row []byte, q []int8, out []int32) bool { return false }

func q4KLanes(qs []byte, q8 []int8, scales *[4]uint32, aux *[8]int32) bool { return false }

func q6KLanes(blk []byte, q8 []int8, scales *[8]uint32, aux *[8]int32) bool { return false }

func dotF32Vec(w, x []float32) (float64, int) { return 0, 0 }

func dotF16Vec(w []uint16, x []float32) (float64, int) { return 0, 0 }
