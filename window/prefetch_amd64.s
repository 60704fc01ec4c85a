#include "textflag.h"

// func prefetch(lines *[maxPrefetchLines]unsafe.Pointer, n int)
TEXT ·prefetch(SB), NOSPLIT, $0-16
	MOVQ lines+0(FP), AX
	MOVQ n+8(FP), CX
loop:
	MOVQ (AX), DX
	PREFETCHT0 (DX)
	ADDQ $8, AX
	DECQ CX
	JNZ loop
	RET
