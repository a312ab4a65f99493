package quant

//go:noescape
func quantizeQ8KAVX2(x *float32, q *int8, d *float32, sums *int16, nb int)

// quantizeQ8KVec is quantizeQ8_K in assembly; false without AVX2.
func quantizeQ8KVec(x []float32, q []int8, d []float32, sums []int16) bool {
	nb := len(d)
	if !haveAVX2 || nb == 0 {
		return false
	}
	_ = x[nb*QKK-1]
	_ = q[nb*QKK-1]
	_ = sums[nb*16-1]
	quantizeQ8KAVX2(&x[0], &q[0], &d[0], &sums[0], nb)
	return true
}

//go:noescape
func quantizeQ8_0AVX2(x *float32, q *int8, d *float32, nb int) bool

// quantizeQ8_0Vec is quantizeQ8_0 in assembly; false without AVX2 or
// when x holds a NaN or an infinity (q and d then partly written).
func quantizeQ8_0Vec(x []float32, q []int8, d []float32) bool {
	nb := len(d)
	if !haveAVX2 || nb == 0 {
		return false
	}
	_ = x[nb*QK8_0-1]
	_ = q[nb*QK8_0-1]
	return quantizeQ8_0AVX2(&x[0], &q[0], &d[0], nb)
}
