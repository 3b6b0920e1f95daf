; IPXRECV.COM: an IPX program that only listens, as a DOS game waiting for another's
; broadcast does. It never calls the IPX send function (03h), so after `ipxnet connect`
; the only datagrams its DOSBox sends are DOSBox's own answers to pings (socket 2,
; pingAck() in src/hardware/ipx.cpp, done by the emulator, not by a DOS program).
;
; Usage:  IPXRECV [count [seconds]]          (defaults: 5 packets, 20 s)
;
; Opens socket 4545h, posts NECB listen ECBs, creates C:\READY.TXT once they are posted,
; then waits until `count` packets have arrived or `seconds` (in BIOS ticks, 0040:006Ch)
; have passed, re-posting every ECB that completes. Then it writes C:\RECV.TXT:
;
;     RECEIVED n
;     ERRORS e
;     <payload of each packet, unprintable bytes as '.', at most 40 bytes>
;     ...
;
; and exits with code 0 (1 if DOSBox has no IPX; the reason is then in C:\RECV.TXT).
;
; The IPX interface, as DOSBox 0.74 implements it (read in src/hardware/ipx.cpp and
; include/ipx.h of DOSBox 0.74-3's source; dosbox-staging's src/hardware/network/ipx.cpp
; has the same ECB offsets, functions and receive path):
; * IPX_Multiplex(): INT 2Fh AX=7A00h returns AL=FFh and the far entry point in ES:DI.
; * handleIpxRequest(): the entry point dispatches on BX. 00h OpenSocket(): DX = socket,
;   big-endian (it does swapByte(reg_dx)); returns AL=0 or FFh (open) / FEh (table full).
;   04h listen: ES:SI = ECB; AL=0, or FFh if the ECB's socket is not open. 0Ah relinquish
;   control: does nothing. 01h CloseSocket(): DX = socket; deletes the socket's ECBs.
; * ECBClass (ipx.cpp) reads the ECB at these offsets: +04h ESR offset, +06h ESR segment
;   (getESRAddr), +08h in-use flag (getInUseFlag; FEh listening, 00h done), +09h
;   completion code (setCompletionFlag; 00h success, FDh malformed: the packet did not
;   fit the fragments), +0Ah socket, big-endian (getSocket), +1Ch immediate address
;   (setImmAddress), +22h fragment count (getFragCount), +24h descriptors of 6 bytes:
;   offset, segment, size (getFragDesc).
; * ECBClass::ECBClass() copies the in-use flag and socket when the call is made, so both
;   are written before the listen call.
; * receivePacket(): a datagram goes to the first listening ECB on its destination socket
;   (network and node are not looked at) or is lost ("RX Packet loss"). NotifyESR() then
;   queues the ECB and raises IRQ 11 even with no ESR; IPX_ESRHandler() copies the data
;   into the fragments there (ECBClass::writeData(): the whole IPX packet, 30-byte header
;   first) and only then sets the in-use flag to 00h. Interrupts must be on, and the
;   flag is polled.

        cpu     8086
        org     100h

SOCKET          equ     4545h
NECB            equ     4               ; listen ECBs kept posted
PKTMAX          equ     576             ; 30-byte header + 546 data bytes per ECB
SHOWMAX         equ     40              ; payload bytes written per packet
LOGMAX          equ     2048            ; room for the payload lines

; ECB offsets (ECBClass in src/hardware/ipx.cpp)
ECB_ESR         equ     04h
ECB_INUSE       equ     08h
ECB_COMPLETION  equ     09h
ECB_SOCKET      equ     0Ah
ECB_IMMEDIATE   equ     1Ch
ECB_FRAGCOUNT   equ     22h
ECB_FRAG0       equ     24h
ECB_SIZE        equ     2Ah             ; one fragment descriptor

; IPX header offsets (IPXHeader in include/ipx.h)
IPX_LENGTH      equ     2               ; big-endian, header included
IPX_HEADER      equ     30

start:
        cld
        sti                             ; IRQ 11 delivers the packets
        mov     si, 81h                 ; PSP command tail
        call    parse_num
        jc      .no_args
        mov     [want], ax
        call    parse_num
        jc      .no_args
        mov     [seconds], ax
.no_args:
        mov     ax, [seconds]           ; ticks = seconds * 18.2
        mov     cx, 182
        mul     cx
        mov     cx, 10
        div     cx
        mov     [limit], ax

        mov     ax, 7A00h               ; IPX installed? (IPX_Multiplex)
        int     2Fh
        cmp     al, 0FFh
        jne     no_ipx
        mov     [ipx_entry], di
        mov     [ipx_entry+2], es
        push    cs
        pop     es

        xor     al, al                  ; short-lived
        mov     dx, (SOCKET >> 8) | ((SOCKET & 0FFh) << 8)
        xor     bx, bx                  ; 00h open socket
        call    far [ipx_entry]
        or      al, al
        jnz     open_failed

        mov     si, ecbs                ; set up and post every ECB
        mov     di, buffers
        mov     cx, NECB
.init:
        mov     word [si+ECB_ESR], 0
        mov     word [si+ECB_ESR+2], 0
        mov     word [si+ECB_SOCKET], (SOCKET >> 8) | ((SOCKET & 0FFh) << 8)
        mov     word [si+ECB_FRAGCOUNT], 1
        mov     [si+ECB_FRAG0], di
        mov     [si+ECB_FRAG0+2], cs
        mov     word [si+ECB_FRAG0+4], PKTMAX
        call    listen
        add     si, ECB_SIZE
        add     di, PKTMAX
        loop    .init

        mov     dx, ready_name          ; tell the test we listen
        mov     si, ready_text
        mov     cx, ready_len
        call    write_file

        mov     ax, 40h
        mov     es, ax
        mov     ax, [es:6Ch]            ; BIOS tick count, low word
        mov     [t0], ax
        push    cs
        pop     es

main_loop:
        mov     si, ecbs
        mov     cx, NECB
.check:
        cmp     byte [si+ECB_INUSE], 0
        jne     .next                   ; still listening (or being filled)
        cmp     byte [si+ECB_COMPLETION], 0
        jne     .error
        inc     word [count]
        call    record
        jmp     .repost
.error:
        inc     word [errors]
.repost:
        call    listen
.next:
        add     si, ECB_SIZE
        loop    .check

        mov     ax, [count]
        cmp     ax, [want]
        jae     finish
        mov     ax, 40h
        mov     es, ax
        mov     ax, [es:6Ch]
        push    cs
        pop     es
        sub     ax, [t0]                ; wraps correctly in 16 bits
        cmp     ax, [limit]
        jae     finish

        mov     bx, 0Ah                 ; relinquish control (a no-op in DOSBox)
        call    far [ipx_entry]
        sti
        hlt                             ; until the timer or IRQ 11
        jmp     main_loop

finish:
        mov     dx, (SOCKET >> 8) | ((SOCKET & 0FFh) << 8)
        mov     bx, 01h                 ; close socket: DOSBox drops our ECBs
        call    far [ipx_entry]

        mov     di, out_buf             ; "RECEIVED n", "ERRORS e", then the payloads
        mov     si, received_label
        call    copy_z
        mov     ax, [count]
        call    put_dec
        call    put_crlf
        mov     si, errors_label
        call    copy_z
        mov     ax, [errors]
        call    put_dec
        call    put_crlf
        mov     si, log_buf
        mov     cx, [log_len]
        rep     movsb
        mov     cx, di
        sub     cx, out_buf
        mov     si, out_buf
        mov     dx, recv_name
        call    write_file
        mov     ax, 4C00h
        int     21h

no_ipx:
        push    cs
        pop     es
        mov     si, no_ipx_text
        mov     cx, no_ipx_len
        jmp     fail
open_failed:
        mov     si, open_failed_text
        mov     cx, open_failed_len
fail:
        mov     dx, recv_name
        call    write_file
        mov     ax, 4C01h
        int     21h

; listen: post the ECB at SI (in CS) on our socket (function 04h).
listen:
        push    cx
        push    si
        push    di
        mov     byte [si+ECB_INUSE], 0
        mov     bx, 04h
        call    far [ipx_entry]         ; ES:SI = ECB
        pop     di
        pop     si
        pop     cx
        ret

; record: append the payload of the packet in the ECB at SI to log_buf, then CR LF.
record:
        push    cx
        push    si
        mov     bx, [si+ECB_FRAG0]      ; the packet
        mov     cx, [bx+IPX_LENGTH]
        xchg    cl, ch                  ; big-endian
        sub     cx, IPX_HEADER
        jbe     .done                   ; no payload (or a bad length)
        cmp     cx, SHOWMAX
        jbe     .fits
        mov     cx, SHOWMAX
.fits:
        mov     ax, LOGMAX - 2
        sub     ax, [log_len]
        cmp     cx, ax
        jbe     .room
        mov     cx, ax                  ; the log is full: what fits
.room:
        lea     si, [bx+IPX_HEADER]
        mov     di, log_buf
        add     di, [log_len]
        add     [log_len], cx
        jcxz    .done
.copy:
        lodsb
        cmp     al, 20h
        jb      .dot
        cmp     al, 7Eh
        jbe     .store
.dot:
        mov     al, '.'
.store:
        stosb
        loop    .copy
        mov     ax, 0A0Dh               ; CR LF
        stosw
        add     word [log_len], 2
.done:
        pop     si
        pop     cx
        ret

%include "dosutil.inc"            ; parse_num, copy_z, put_dec, put_crlf, write_file

want            dw      5
seconds         dw      20
count           dw      0
errors          dw      0
log_len         dw      0
ready_name      db      'C:\READY.TXT', 0
recv_name       db      'C:\RECV.TXT', 0
ready_text      db      'READY', 13, 10
ready_len       equ     $ - ready_text
received_label  db      'RECEIVED ', 0
errors_label    db      'ERRORS ', 0
no_ipx_text     db      'ERROR no IPX (INT 2Fh AX=7A00h)', 13, 10
no_ipx_len      equ     $ - no_ipx_text
open_failed_text db     'ERROR cannot open socket 4545h', 13, 10
open_failed_len equ     $ - open_failed_text

        section .bss
        alignb  2
ipx_entry       resd    1
limit           resw    1
t0              resw    1
ecbs            resb    NECB * ECB_SIZE
buffers         resb    NECB * PKTMAX
log_buf         resb    LOGMAX
out_buf         resb    LOGMAX + 64
