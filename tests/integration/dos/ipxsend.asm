; IPXSEND.COM: send `count` IPX broadcasts with a counter in the payload, then exit.
;
; Usage:  IPXSEND [count [gap]]       (defaults: 5 packets, a gap of 2 BIOS ticks, 110 ms)
;
; Each packet goes from socket 4545h to network 0, node FFFFFFFFFFFFh, socket 4545h with
; the payload "IPXSEND n" (n = 1..count), one every `gap` ticks of the BIOS clock
; (0040:006Ch, 18.2 a second). It listens for nothing. At the end it writes C:\SENT.TXT:
;
;     SENT n
;     ERRORS e
;
; and exits with code 0 (1 if DOSBox has no IPX; the reason is then in C:\SENT.TXT).
;
; The IPX interface, as DOSBox 0.74 implements it (src/hardware/ipx.cpp and
; include/ipx.h of DOSBox 0.74-3's source; see ipxrecv.asm for the ECB offsets):
; * IPX_Multiplex(): INT 2Fh AX=7A00h gives AL=FFh and the far entry point in ES:DI;
;   handleIpxRequest() dispatches on BX: 00h OpenSocket() (DX = socket, big-endian),
;   03h send (ES:SI = ECB; AL=FFh if `ipxnet connect` has not been made), 01h close.
; * sendPacket(): it reads the fragments, writes our network, node and socket into the
;   source fields and FFFFh into the checksum, recomputes the length, and sends the
;   datagram to the server at once (SDLNet_UDP_Send), so the ECB is done (in-use flag 00h,
;   completion code 00h, or FFh if the send failed) when the call returns. An immediate
;   address of FFFFFFFFFFFFh also loops the packet back to this DOSBox's own listeners
;   (we have none). The ECB's socket need not be open to send (only listen checks it);
;   we open it anyway, as a program would.

        cpu     8086
        org     100h

SOCKET          equ     4545h
SOCKET_BE       equ     (SOCKET >> 8) | ((SOCKET & 0FFh) << 8)

ECB_ESR         equ     04h
ECB_INUSE       equ     08h
ECB_COMPLETION  equ     09h
ECB_SOCKET      equ     0Ah
ECB_IMMEDIATE   equ     1Ch
ECB_FRAGCOUNT   equ     22h
ECB_FRAG0       equ     24h
ECB_SIZE        equ     2Ah

IPX_HEADER      equ     30

start:
        cld
        sti
        mov     si, 81h                 ; PSP command tail
        call    parse_num
        jc      .no_args
        mov     [want], ax
        call    parse_num
        jc      .no_args
        mov     [gap], ax
.no_args:
        mov     ax, 7A00h               ; IPX installed? (IPX_Multiplex)
        int     2Fh
        cmp     al, 0FFh
        jne     no_ipx
        mov     [ipx_entry], di
        mov     [ipx_entry+2], es
        push    cs
        pop     es

        xor     al, al                  ; short-lived
        mov     dx, SOCKET_BE
        xor     bx, bx                  ; 00h open socket
        call    far [ipx_entry]
        or      al, al
        jnz     open_failed

send_loop:
        mov     ax, [sent]
        add     ax, [errors]
        cmp     ax, [want]
        jae     finish
        inc     ax                      ; this packet's number, 1..count
        mov     di, payload_number
        call    put_dec
        sub     di, packet              ; header + payload
        mov     [size], di

        mov     di, ecb                 ; the ECB, afresh each time
        xor     ax, ax
        mov     cx, ECB_SIZE / 2
        rep     stosw
        mov     word [ecb+ECB_SOCKET], SOCKET_BE
        mov     word [ecb+ECB_IMMEDIATE], 0FFFFh
        mov     word [ecb+ECB_IMMEDIATE+2], 0FFFFh
        mov     word [ecb+ECB_IMMEDIATE+4], 0FFFFh
        mov     word [ecb+ECB_FRAGCOUNT], 1
        mov     word [ecb+ECB_FRAG0], packet
        mov     [ecb+ECB_FRAG0+2], cs
        mov     ax, [size]
        mov     [ecb+ECB_FRAG0+4], ax

        mov     si, ecb
        mov     bx, 03h                 ; send packet
        call    far [ipx_entry]
        or      al, al
        jnz     .error
        cmp     byte [ecb+ECB_INUSE], 0 ; sendPacket() completes before it returns
        jne     .error
        cmp     byte [ecb+ECB_COMPLETION], 0
        jne     .error
        inc     word [sent]
        jmp     .wait
.error:
        inc     word [errors]
.wait:
        mov     ax, [sent]
        add     ax, [errors]
        cmp     ax, [want]
        jae     finish                  ; no gap after the last one
        call    ticks
        mov     [t0], ax
.tick:
        sti
        hlt                             ; until the next timer interrupt
        call    ticks
        sub     ax, [t0]
        cmp     ax, [gap]
        jb      .tick
        jmp     send_loop

finish:
        mov     dx, SOCKET_BE
        mov     bx, 01h                 ; close socket
        call    far [ipx_entry]

        mov     di, out_buf
        mov     si, sent_label
        call    copy_z
        mov     ax, [sent]
        call    put_dec
        call    put_crlf
        mov     si, errors_label
        call    copy_z
        mov     ax, [errors]
        call    put_dec
        call    put_crlf
        mov     cx, di
        sub     cx, out_buf
        mov     si, out_buf
        mov     dx, sent_name
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
        mov     dx, sent_name
        call    write_file
        mov     ax, 4C01h
        int     21h

; ticks: AX = low word of the BIOS tick count (0040:006Ch).
ticks:
        push    es
        mov     ax, 40h
        mov     es, ax
        mov     ax, [es:6Ch]
        pop     es
        ret

%include "dosutil.inc"            ; parse_num, copy_z, put_dec, put_crlf, write_file

want            dw      5
gap             dw      2
sent            dw      0
errors          dw      0
size            dw      0
sent_name       db      'C:\SENT.TXT', 0
sent_label      db      'SENT ', 0
errors_label    db      'ERRORS ', 0
no_ipx_text     db      'ERROR no IPX (INT 2Fh AX=7A00h)', 13, 10
no_ipx_len      equ     $ - no_ipx_text
open_failed_text db     'ERROR cannot open socket 4545h', 13, 10
open_failed_len equ     $ - open_failed_text

; The packet: IPX header (IPXHeader in include/ipx.h, big-endian) and payload.
packet:
        dw      0FFFFh                  ; checksum: DOSBox writes FFFFh anyway
        dw      0                       ; length: sendPacket() fills it in
        db      0                       ; transport control (hops)
        db      4                       ; packet type: PEP, as games send
        dd      0                       ; destination network
        db      0FFh, 0FFh, 0FFh, 0FFh, 0FFh, 0FFh  ; destination node: broadcast
        dw      SOCKET_BE               ; destination socket
        times 12 db 0                   ; source: DOSBox fills it in
payload:
        db      'IPXSEND '
payload_number:
        times 6 db 0                    ; the counter, in decimal

        section .bss
        alignb  2
ipx_entry       resd    1
t0              resw    1
ecb             resb    ECB_SIZE
out_buf         resb    64
