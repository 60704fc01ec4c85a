#include "textflag.h"

// func prefetch(lines *[maxPrefetchLines]unsafe.Pointer, n int)
TEXT ·prefetch(SB), NOSPLIT, $0-16
	MOVD lines+0(FP), R0
	MOVD n+8(FP), R1
loop:
	MOVD.P 8(R0), R2
	PRFM (R2), PLDL1KEEP
	SUBS $1, R1, R1
	BNE loop
	RET
