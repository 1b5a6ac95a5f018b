// The two pieces of the Metal simulator that C cannot write: objc_msgSend,
// which finds the method of (self, _cmd) and jumps to it with the caller's
// arguments untouched (registers and stack, whatever the prototype), and
// the fibers' context switch.
	.text

	.globl objc_msgSend
	.type objc_msgSend, @function
objc_msgSend:
	push %rbp
	mov %rsp, %rbp
	sub $192, %rsp
	mov %rdi, 0(%rsp)
	mov %rsi, 8(%rsp)
	mov %rdx, 16(%rsp)
	mov %rcx, 24(%rsp)
	mov %r8, 32(%rsp)
	mov %r9, 40(%rsp)
	mov %rax, 48(%rsp)
	movdqu %xmm0, 64(%rsp)
	movdqu %xmm1, 80(%rsp)
	movdqu %xmm2, 96(%rsp)
	movdqu %xmm3, 112(%rsp)
	movdqu %xmm4, 128(%rsp)
	movdqu %xmm5, 144(%rsp)
	movdqu %xmm6, 160(%rsp)
	movdqu %xmm7, 176(%rsp)
	call mcsim_lookup@PLT
	mov %rax, %r11
	mov 0(%rsp), %rdi
	mov 8(%rsp), %rsi
	mov 16(%rsp), %rdx
	mov 24(%rsp), %rcx
	mov 32(%rsp), %r8
	mov 40(%rsp), %r9
	mov 48(%rsp), %rax
	movdqu 64(%rsp), %xmm0
	movdqu 80(%rsp), %xmm1
	movdqu 96(%rsp), %xmm2
	movdqu 112(%rsp), %xmm3
	movdqu 128(%rsp), %xmm4
	movdqu 144(%rsp), %xmm5
	movdqu 160(%rsp), %xmm6
	movdqu 176(%rsp), %xmm7
	leave
	jmp *%r11
	.size objc_msgSend, .-objc_msgSend

// void mcsim_switch(void** save, void* to): saves this context's stack
// pointer at *save and resumes the one whose stack pointer is to
	.globl mcsim_switch
	.hidden mcsim_switch
	.type mcsim_switch, @function
mcsim_switch:
	push %rbp
	push %rbx
	push %r12
	push %r13
	push %r14
	push %r15
	mov %rsp, (%rdi)
	mov %rsi, %rsp
	pop %r15
	pop %r14
	pop %r13
	pop %r12
	pop %rbx
	pop %rbp
	ret
	.size mcsim_switch, .-mcsim_switch

// a new fiber's first frame: calls r12(rbx), which never returns
	.globl mcsim_fiber_start
	.hidden mcsim_fiber_start
	.type mcsim_fiber_start, @function
mcsim_fiber_start:
	mov %rbx, %rdi
	call *%r12
	ud2
	.size mcsim_fiber_start, .-mcsim_fiber_start

	.section .note.GNU-stack,"",@progbits
