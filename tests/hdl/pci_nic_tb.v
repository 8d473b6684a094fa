// Independent model of a NIC sharing a PCI bus, for nicrig's phase analysis (Icarus Verilog).
//
// Written from the PCI Local Bus Specification 2.3, chapter 3 (bus commands,
// address and data phases, turnaround, FRAME#/IRDY#/TRDY#/DEVSEL#/STOP#,
// target retry and disconnect, delayed transactions, REQ#/GNT# arbitration and
// bus parking) and from the register model of an Intel 8254x-style NIC
// (8254x Family of Gigabit Ethernet Controllers Software Developer's Manual:
// legacy 16-byte descriptors, the TDT doorbell, read-to-clear ICR, the IMS mask),
// not from nicrig's Python simulator. One 32-bit bus at 33 MHz, three agents:
//
//  * the host bridge (hb): the CPU's register accesses to the NIC's BAR
//    (memory reads and writes mastered by the bridge) and system memory as the
//    target of every DMA (medium DEVSEL#, initial wait states, a disconnect
//    with data at each 128-byte boundary: its prefetch and posting buffers);
//  * the NIC (nic): target of its BAR (the interrupt cause register is read as a
//    delayed transaction: the first attempt is retried with STOP#), master of
//    its DMA (descriptor fetch, frame read, frame write, descriptor writebacks),
//    INTA# while an enabled cause is pending;
//  * a second bus master (dsk, a disk controller) writing sectors to memory.
//
// A central arbiter grants the bus round robin (hidden arbitration during a
// transaction, one clock without any GNT# before another agent is granted an
// idle bus) and parks it on the host bridge, which then drives AD, C/BE# and,
// a clock later, PAR.
//
// The driver (the host bridge's CPU) runs three register sequences, each access
// a separate transaction: send = write TDT (the doorbell); service = read ICR
// (clears the cause, INTA# goes high), read STATUS; update = write RDT, write
// IMS, after the poll's work. A request arriving from the link (a frame the NIC
// writes to memory) is answered by a response frame of the size the script says.
//
// The testbench's own truth: for every rising CLK edge, the line
//     <t_ns> <phase> <granted>
// in the file +cycles=FILE: the phase of the transaction on the bus in that
// clock (from its address phase to its final data phase), as the agent that
// mastered it knows it: send:N, service:N, update:N (the CPU's sequences),
// fetch:N, receive:N, writeback:N (the NIC's DMA for frame N), other (the
// second master), idle; and whose GNT# was asserted (hb, nic, dsk, -).
// Plusargs: +vcd=FILE, +cycles=FILE.
`timescale 1ns/1ps

// Phase codes of the truth (tag = code * 1000 + instance)
`define T_SEND 1
`define T_SERVICE 2
`define T_UPDATE 3
`define T_FETCH 4
`define T_RECEIVE 5
`define T_WRITEBACK 6
`define T_OTHER 7

module pci_initiator #(parameter TVAL = 2) (
    input  wire        CLK,
    inout  wire [31:0] AD,
    inout  wire [3:0]  CBE_N,
    inout  wire        PAR,
    inout  wire        FRAME_N,
    inout  wire        IRDY_N,
    input  wire        TRDY_N,
    input  wire        DEVSEL_N,
    input  wire        STOP_N,
    output reg         REQ_N,
    input  wire        GNT_N
);
    reg [31:0] ad_o;
    reg [3:0]  cbe_o;
    reg ad_oe, cbe_oe, park, frame_o, frame_oe, irdy_o, irdy_oe, par_o, par_oe;
    reg active;                 // from the address phase to the final data phase (for the truth)
    integer tag;                // the phase the current transaction belongs to
    reg [31:0] rdata;           // last data read

    assign AD      = ad_oe  ? ad_o  : (park ? 32'h0 : 32'bz);
    assign CBE_N   = cbe_oe ? cbe_o : (park ? 4'h0 : 4'bz);
    assign FRAME_N = frame_oe ? frame_o : 1'bz;
    assign IRDY_N  = irdy_oe  ? irdy_o  : 1'bz;
    assign PAR     = par_oe   ? par_o   : 1'bz;

    initial begin
        REQ_N = 1; ad_o = 0; cbe_o = 4'hf; ad_oe = 0; cbe_oe = 0; park = 0;
        frame_o = 1; frame_oe = 0; irdy_o = 1; irdy_oe = 0; par_o = 0; par_oe = 0;
        active = 0; tag = 0; rdata = 0;
    end

    // PAR: even parity of AD[31:0] and C/BE#[3:0], one clock after them, by the agent that drove AD.
    always @(posedge CLK) begin
        par_oe <= #TVAL (ad_oe || park);
        par_o  <= #TVAL ^{AD, CBE_N};
    end

    // Bus parking (3.4.3): granted an idle bus with nothing to do, drive AD and C/BE# (PAR a clock later).
    always @(posedge CLK)
        park <= #TVAL (GNT_N === 1'b0 && FRAME_N === 1'b1 && IRDY_N === 1'b1 && !active);

    function is_read(input [3:0] c);
        is_read = (c == 4'h6) || (c == 4'hC) || (c == 4'hE);
    endfunction

    // One transaction of up to ``nwords`` data phases; returns the phases that moved data and the last read.
    task transact(input [3:0] cmd, input [31:0] addr, input [31:0] wval, input integer nwords, input integer t,
                  output integer moved);
        reg rd, done;
        integer k;
        begin
            rd = is_read(cmd);
            REQ_N <= #TVAL 0;
            // A master starts when it samples its GNT# and an idle bus (FRAME# and IRDY# high) on one edge (3.4.1).
            @(posedge CLK);
            while (!(GNT_N === 1'b0 && FRAME_N === 1'b1 && IRDY_N === 1'b1)) @(posedge CLK);
            active <= #TVAL 1; tag = t;
            REQ_N <= #TVAL 1;                      // one transaction per request: released with FRAME#
            frame_oe <= #TVAL 1; frame_o <= #TVAL 0;
            ad_oe <= #TVAL 1; cbe_oe <= #TVAL 1; ad_o <= #TVAL addr; cbe_o <= #TVAL cmd;
            @(posedge CLK);                         // the address phase
            cbe_o <= #TVAL 4'h0;                    // all byte lanes
            irdy_oe <= #TVAL 1; irdy_o <= #TVAL 0;
            if (rd) ad_oe <= #TVAL 0;               // turnaround: the target drives AD from the next clock
            else ad_o <= #TVAL wval;
            if (nwords == 1) frame_o <= #TVAL 1;    // the first data phase is the last
            moved = 0; done = 0; k = 0;
            while (!done) begin
                @(posedge CLK);
                k = k + 1;
                if (k > 6 && DEVSEL_N !== 1'b0) begin
                    $display("ERROR master abort at %0d ns: no target for 0x%0h", $time, addr);
                    $finish;
                end
                if (TRDY_N === 1'b0 || STOP_N === 1'b0) begin     // IRDY# is asserted: a data phase completes
                    if (TRDY_N === 1'b0) begin
                        moved = moved + 1;
                        if (rd) rdata = AD;
                    end
                    if (FRAME_N === 1'b1) done = 1;                     // that was the final data phase
                    else if (STOP_N === 1'b0) frame_o <= #TVAL 1;      // target termination: finish next clock
                    else begin
                        if (!rd) ad_o <= #TVAL wval + moved;
                        if (moved == nwords - 1) frame_o <= #TVAL 1;
                    end
                end
            end
            // FRAME# was driven high through the final data phase; IRDY# is driven high for one clock more
            // (sustained tri-state), then released.
            active <= #TVAL 0;
            irdy_o <= #TVAL 1; frame_oe <= #TVAL 0; ad_oe <= #TVAL 0; cbe_oe <= #TVAL 0;
            @(posedge CLK);
            irdy_oe <= #TVAL 0;
        end
    endtask

    // ``nwords`` data phases from ``addr`` (writing wval, wval + 1, ...): a transfer a target retried is
    // repeated, one it disconnected resumes at the next address (3.3.3.2), each time after arbitrating again.
    task transfer(input [3:0] cmd, input [31:0] addr, input [31:0] wval, input integer nwords, input integer t);
        integer left, moved;
        reg [31:0] a;
        begin
            a = addr; left = nwords;
            while (left > 0) begin
                transact(cmd, a, wval + (nwords - left), left, t, moved);
                a = a + 4 * moved; left = left - moved;
            end
        end
    endtask
endmodule


// A memory target at [BASE, BASE + SIZE): medium DEVSEL#, RD_WAIT / WR_WAIT target waits before the first data
// phase, a disconnect with data on the phase before each BOUNDARY-byte boundary (0: none), and reads of the
// offset DELAYED (-1: none) as delayed transactions completed DELAY_CLOCKS after the first attempt (3.3.3.3).
module pci_target32 #(parameter TVAL = 2, parameter [31:0] BASE = 0, parameter [31:0] SIZE = 0,
                      parameter RD_WAIT = 0, parameter WR_WAIT = 0, parameter BOUNDARY = 0,
                      parameter DELAYED = -1, parameter DELAY_CLOCKS = 8) (
    input  wire        CLK,
    input  wire        RST_N,
    inout  wire [31:0] AD,
    input  wire [3:0]  CBE_N,
    inout  wire        PAR,
    input  wire        FRAME_N,
    input  wire        IRDY_N,
    inout  wire        TRDY_N,
    inout  wire        DEVSEL_N,
    inout  wire        STOP_N,
    input  wire [31:0] rd_data      // what a read of ``offset`` returns (the owner's registers)
);
    localparam IDLE = 0, ACTIVE = 1;
    reg [31:0] ad_o;
    reg ad_oe, par_o, par_oe;
    assign AD       = ad_oe ? ad_o : 32'bz;
    assign PAR      = par_oe ? par_o : 1'bz;
    `include "pci_target_phases.vh"

    // completed accesses, for the owner: offset, direction, data phases
    event accessed;
    reg [31:0] offset, acc_data;
    reg acc_write;
    integer acc_words;
    // a delayed read: the request latched, completed on this clock, its data
    reg pending;
    integer ready_at, clocks;
    reg [31:0] pending_off, held;

    integer state;
    reg f_prev, rd, retrying, done;
    reg [31:0] addr;

    initial begin
        ad_o = 0; ad_oe = 0; par_o = 0; par_oe = 0; devsel = 2;      // medium decode
        state = IDLE; f_prev = 0; pending = 0; clocks = 0; offset = 0; held = 0;
    end

    always @(posedge CLK) begin
        par_oe <= #TVAL ad_oe;
        par_o  <= #TVAL ^{AD, CBE_N};
    end

    function is_mem(input [3:0] c);
        is_mem = (c == 4'h6) || (c == 4'h7) || (c == 4'hC) || (c == 4'hE) || (c == 4'hF);
    endfunction

    task respond;    // TRDY# / STOP# for data phase p, decided k clocks after the address phase (k >= 1)
        begin
            if (retrying) begin
                stop_o <= #TVAL 0; trdy_o <= #TVAL 1; stopping = 1;
            end else if (BOUNDARY != 0 && FRAME_N === 1'b0 && ((addr + 4 * (p + 1)) % BOUNDARY) == 0) begin
                stop_o <= #TVAL 0; trdy_o <= #TVAL 0; stopping = 1;      // disconnect with data
            end else
                trdy_o <= #TVAL 0;
            if (rd) ad_o <= #TVAL (DELAYED >= 0 && addr - BASE == DELAYED) ? held : rd_data;
        end
    endtask

    task next_phase;
        resp_at = k;                   // no waits after the first data phase
    endtask

    task devsel_asserted;              // DEVSEL# alone: a 32-bit target
        begin end
    endtask

    task drive_ad;
        ad_oe <= #TVAL 1;
    endtask

    always @(posedge CLK) begin : fsm
        clocks = clocks + 1;
        sample_control;
        if (pending && clocks == ready_at) begin
            offset = pending_off; held = rd_data;      // the delayed read completes inside the device
            acc_write = 0; acc_words = 1;
            -> accessed;
        end
        if (!RST_N)
            state = IDLE;
        else case (state)
            IDLE:
                if (f && !f_prev && is_mem(CBE_N) && AD >= BASE && AD - BASE < SIZE) begin
                    addr = AD; rd = !CBE_N[0]; offset = AD - BASE;
                    start_phases;
                    retrying = 0;
                    if (rd && DELAYED >= 0 && offset == DELAYED) begin
                        if (!pending) begin            // latch the request, complete it later
                            pending = 1; pending_off = offset; ready_at = clocks + DELAY_CLOCKS;
                        end
                        retrying = clocks < ready_at;
                    end
                    resp_at = (rd ? 1 : devsel - 1) + (rd ? RD_WAIT : WR_WAIT);
                    if (resp_at < 1) resp_at = 1;
                    state = ACTIVE;
                    drive_tick;
                end
            ACTIVE: begin
                if (ir && tr && !rd && cnt == 0) acc_data = AD;     // the first data phase of a write completes
                data_phase(done);
                if (done) begin
                    ad_oe <= #TVAL 0; state = IDLE;
                    if (cnt > 0 && rd && DELAYED >= 0 && offset == DELAYED) pending = 0;
                    else if (cnt > 0) begin
                        acc_write = !rd; acc_words = cnt;
                        -> accessed;
                    end
                end
            end
        endcase
        f_prev = f;
    end
endmodule


// Central arbiter: round robin over REQ#[N-1:0], parked on agent PARK.
module pci_arbiter #(parameter TVAL = 2, parameter N = 3, parameter PARK = 0) (
    input  wire         CLK,
    input  wire         RST_N,
    input  wire [N-1:0] REQ_N,
    output reg  [N-1:0] GNT_N,
    input  wire         FRAME_N,
    input  wire         IRDY_N
);
    integer g, i, nxt;
    reg used, f_prev;
    reg [N-1:0] gnt_seen;           // GNT# as sampled on the previous edge
    initial begin GNT_N = {N{1'b1}}; g = -1; used = 0; f_prev = 1; gnt_seen = {N{1'b1}}; end

    always @(posedge CLK) begin : decide
        reg idle;
        idle = (FRAME_N === 1'b1 && IRDY_N === 1'b1);
        if (!RST_N) g = -1;
        else begin
            // an address phase now: begun by the agent that saw its GNT# on the previous edge
            if (FRAME_N === 1'b0 && f_prev && g >= 0 && gnt_seen[g] == 1'b0) used = 1;
            nxt = -1;
            for (i = 1; i <= N && nxt < 0; i = i + 1)
                if (REQ_N[((g < 0 ? PARK : g) + i) % N] === 1'b0) nxt = ((g < 0 ? PARK : g) + i) % N;
            if (g >= 0 && REQ_N[g] === 1'b0 && !used)
                ;                                   // granted and waiting for an idle bus
            else begin
                if (nxt < 0) nxt = PARK;            // nobody asks: park
                if (nxt != g) begin
                    // On an idle bus the agent granted (or parked) first lets go of AD: one clock with no GNT#.
                    if (idle && g >= 0) g = -1;
                    else begin g = nxt; used = 0; end
                end else if (used && REQ_N[g] === 1'b0) used = 0;
            end
        end
        gnt_seen = GNT_N;
        GNT_N <= #TVAL (g < 0) ? {N{1'b1}} : ~({{N-1{1'b0}}, 1'b1} << g);
        f_prev = (FRAME_N !== 1'b0);
    end
endmodule


module pci_nic_tb;
    parameter TVAL = 2;
    localparam PERIOD = 30;                       // 33.33 MHz
    localparam [31:0] BAR = 32'hfd00_0000, BAR_SIZE = 32'h0002_0000;
    localparam STATUS = 32'h0008, ICR = 32'h00c0, IMS = 32'h00d0, RDT = 32'h2818, TDT = 32'h3818;
    localparam [31:0] TX_RING = 32'h0010_0000, RX_RING = 32'h0011_0000, TX_BUF = 32'h0020_0000,
                      RX_BUF = 32'h0030_0000, DISK_BUF = 32'h0800_0000;
    localparam TXDW = 32'h1, RXT0 = 32'h80;
    localparam NIC_BURST_WORDS = 64;              // the NIC's DMA bursts: 256 bytes at most
    localparam REQUESTS = 8;

    reg CLK = 0;
    reg RST_N = 0;
    tri  [31:0] AD;
    tri  [3:0]  CBE_N;
    tri         PAR;
    tri1        FRAME_N, IRDY_N, TRDY_N, DEVSEL_N, STOP_N, INTA_N;
    wire        REQ_N, GNT_N, HB_REQ_N, HB_GNT_N, DSK_REQ_N, DSK_GNT_N;
    always #(PERIOD / 2) CLK = ~CLK;

    pci_arbiter #(.TVAL(TVAL), .N(3), .PARK(0)) arb (.CLK(CLK), .RST_N(RST_N),
        .REQ_N({DSK_REQ_N, REQ_N, HB_REQ_N}), .GNT_N({DSK_GNT_N, GNT_N, HB_GNT_N}),
        .FRAME_N(FRAME_N), .IRDY_N(IRDY_N));

    // ---- the host bridge: the CPU's master, system memory's target --------------------------------
    pci_initiator #(.TVAL(TVAL)) hb (.CLK(CLK), .AD(AD), .CBE_N(CBE_N), .PAR(PAR), .FRAME_N(FRAME_N),
        .IRDY_N(IRDY_N), .TRDY_N(TRDY_N), .DEVSEL_N(DEVSEL_N), .STOP_N(STOP_N), .REQ_N(HB_REQ_N), .GNT_N(HB_GNT_N));
    pci_target32 #(.TVAL(TVAL), .BASE(0), .SIZE(32'h4000_0000), .RD_WAIT(3), .WR_WAIT(1), .BOUNDARY(128)) mem (
        .CLK(CLK), .RST_N(RST_N), .AD(AD), .CBE_N(CBE_N), .PAR(PAR), .FRAME_N(FRAME_N), .IRDY_N(IRDY_N),
        .TRDY_N(TRDY_N), .DEVSEL_N(DEVSEL_N), .STOP_N(STOP_N), .rd_data(32'h0));

    // ---- the NIC: registers, INTA#, DMA ------------------------------------------------------------
    pci_initiator #(.TVAL(TVAL)) nic (.CLK(CLK), .AD(AD), .CBE_N(CBE_N), .PAR(PAR), .FRAME_N(FRAME_N),
        .IRDY_N(IRDY_N), .TRDY_N(TRDY_N), .DEVSEL_N(DEVSEL_N), .STOP_N(STOP_N), .REQ_N(REQ_N), .GNT_N(GNT_N));
    reg [31:0] icr, ims;
    wire [31:0] reg_out = (csr.offset == ICR) ? icr : (csr.offset == IMS) ? ims : 32'h0;
    pci_target32 #(.TVAL(TVAL), .BASE(BAR), .SIZE(BAR_SIZE), .RD_WAIT(2), .WR_WAIT(0), .DELAYED(ICR),
                   .DELAY_CLOCKS(6)) csr (
        .CLK(CLK), .RST_N(RST_N), .AD(AD), .CBE_N(CBE_N), .PAR(PAR), .FRAME_N(FRAME_N), .IRDY_N(IRDY_N),
        .TRDY_N(TRDY_N), .DEVSEL_N(DEVSEL_N), .STOP_N(STOP_N), .rd_data(reg_out));
    reg inta = 0;
    assign INTA_N = inta ? 1'b0 : 1'bz;           // open drain, pulled up
    always @(posedge CLK) inta <= #TVAL ((icr & ims) != 0);

    // ---- the second master: a disk controller writing sectors to memory ----------------------------
    pci_initiator #(.TVAL(TVAL)) dsk (.CLK(CLK), .AD(AD), .CBE_N(CBE_N), .PAR(PAR), .FRAME_N(FRAME_N),
        .IRDY_N(IRDY_N), .TRDY_N(TRDY_N), .DEVSEL_N(DEVSEL_N), .STOP_N(STOP_N), .REQ_N(DSK_REQ_N), .GNT_N(DSK_GNT_N));

    // ---- the script ----------------------------------------------------------------------------------
    localparam [3:0] MRD = 4'h6, MWR = 4'h7, MRM = 4'hC;
    integer req_len [0:REQUESTS-1];               // request frames from the link (bytes, no FCS)
    integer resp_len[0:REQUESTS-1];               // the responses the application sends
    // Host memory the CPU and the NIC share without the bus showing it (the CPU's side goes through the
    // host bridge to memory): each transmit descriptor's length, and how many receive descriptors the NIC
    // has written back (their DD bits, which the poll reads).
    integer tx_len[0:63];
    integer received;
    // driver state
    integer tail, answered, n_send, n_irq;
    // NIC state: its copy of TDT, the transmit head, frames handed to the MAC / sent, writebacks due
    reg [31:0] nic_tdt;
    integer tdh, sent, wb_done;
    // the link: request frames waiting in the NIC's receive FIFO
    integer rx_len[0:15];
    integer rx_head, rx_tail, finished;

    task csr_write(input [31:0] off, input [31:0] value, input integer t);
        hb.transfer(MWR, BAR + off, value, 1, t);
    endtask

    task csr_read(input [31:0] off, input integer t);
        hb.transfer(MRD, BAR + off, 0, 1, t);
    endtask

    // the NIC's DMA of ``bytes`` in bursts of NIC_BURST_WORDS at most
    task dma(input [3:0] cmd, input [31:0] addr, input integer bytes, input integer t);
        integer words, w, n;
        begin
            words = (bytes + 3) / 4;
            w = 0;
            while (w < words) begin
                n = words - w > NIC_BURST_WORDS ? NIC_BURST_WORDS : words - w;
                nic.transfer(cmd, addr + 4 * w, addr + 4 * w, n, t);
                w = w + n;
            end
        end
    endtask

    task send_frame(input integer len);
        begin
            tx_len[tail % 64] = len;
            tail = tail + 1;
            n_send = n_send + 1;
            csr_write(TDT, tail % 64, `T_SEND * 1000 + n_send);
        end
    endtask

    // The CPU: three frames sent ahead, then every interrupt served; each request received is answered.
    initial begin : cpu
        integer k;
        @(posedge RST_N);
        repeat (20) @(posedge CLK);
        for (k = 0; k < 3; k = k + 1) begin
            send_frame(200 + 400 * k);
            #(300);
        end
        forever begin
            if (INTA_N === 1'b0) begin
                n_irq = n_irq + 1;
                #(200);                                         // interrupt latency to the first access
                csr_read(ICR, `T_SERVICE * 1000 + n_irq);       // read to clear: INTA# goes high
                #(300);
                csr_read(STATUS, `T_SERVICE * 1000 + n_irq);
                // the poll: clean the transmit ring, pass received frames up, refill the receive ring
                #(1800 + 600 * (received - answered));
                csr_write(RDT, received % 64, `T_UPDATE * 1000 + n_irq);
                #(250);
                csr_write(IMS, TXDW | RXT0, `T_UPDATE * 1000 + n_irq);
                while (answered < received) begin             // the application answers each request
                    #(2500);
                    answered = answered + 1;
                    send_frame(resp_len[answered - 1]);
                end
            end else
                @(posedge CLK);
        end
    end

    // The NIC's registers: TDT (the doorbell), ICR read to clear, IMS. INTA# while an enabled cause is set.
    always @(csr.accessed) begin
        if (!csr.acc_write && csr.offset == ICR) icr <= #TVAL 0;
        if (csr.acc_write && csr.offset == IMS) ims <= #TVAL csr.acc_data;
        if (csr.acc_write && csr.offset == TDT) nic_tdt <= #TVAL csr.acc_data;
    end

    // The NIC's DMA engine, one transfer at a time: received frames first, then writebacks, then fetches.
    initial begin : engine
        integer slot, len;
        reg waited;
        @(posedge RST_N);
        waited = 1;
        forever begin
            if (rx_head != rx_tail) begin
                len = rx_len[rx_head % 16];
                slot = received % 64;
                #(700);                                        // the MAC's receive latency
                dma(MWR, RX_BUF + slot * 32'h800, len, `T_RECEIVE * 1000 + received + 1);
                dma(MWR, RX_RING + slot * 16, 16, `T_RECEIVE * 1000 + received + 1);
                rx_head = rx_head + 1;
                received = received + 1;
                icr <= #TVAL icr | RXT0;
            end else if (wb_done < sent) begin
                slot = wb_done % 64;
                dma(MWR, TX_RING + slot * 16, 16, `T_WRITEBACK * 1000 + wb_done + 1);
                wb_done = wb_done + 1;
                icr <= #TVAL icr | TXDW;
            end else if (tdh % 64 != nic_tdt) begin
                slot = tdh % 64;
                if (waited) #(400);                            // the doorbell reaches an idle transmit engine
                dma(MRD, TX_RING + slot * 16, 16, `T_FETCH * 1000 + tdh + 1);
                dma(MRM, TX_BUF + slot * 32'h800, tx_len[slot], `T_FETCH * 1000 + tdh + 1);
                tdh = tdh + 1;
            end
            waited = !(rx_head != rx_tail || wb_done < sent || tdh % 64 != nic_tdt);
            if (waited) @(posedge CLK);
        end
    end

    // The MAC: frames fetched go out on the wire one after the other (latency, preamble to FCS, the gap).
    initial begin : mac
        @(posedge RST_N);
        forever begin
            if (sent < tdh) begin
                #(1000 + (tx_len[sent % 64] + 4 + 20) * 8);
                sent = sent + 1;
            end else
                @(posedge CLK);
        end
    end

    // The link: the peer sends a request once the previous response has left (its own stack time later).
    initial begin : peer
        integer i;
        @(posedge RST_N);
        wait (sent == 3);
        for (i = 0; i < REQUESTS; i = i + 1) begin
            #(6000);
            rx_len[rx_tail % 16] = req_len[i]; rx_tail = rx_tail + 1;
            wait (sent == 3 + i + 1);
        end
        wait (wb_done == sent);
        #(8000);
        finished = 1;
    end

    // The disk controller: a 128-byte burst into memory every ~2.7 us.
    initial begin : disk
        integer s;
        @(posedge RST_N);
        s = 0;
        while (!finished) begin
            dsk.transfer(MWR, DISK_BUF + s * 128, s, 32, `T_OTHER * 1000);
            s = s + 1;
            #(1700);
        end
    end

    // ---- the truth and the capture -------------------------------------------------------------------
    integer fd;
    reg [8*256:1] vcd, cycles;
    function [8*16:1] phase_name(input integer t);
        case (t / 1000)
            `T_SEND: phase_name = "send";
            `T_SERVICE: phase_name = "service";
            `T_UPDATE: phase_name = "update";
            `T_FETCH: phase_name = "fetch";
            `T_RECEIVE: phase_name = "receive";
            `T_WRITEBACK: phase_name = "writeback";
            default: phase_name = "other";
        endcase
    endfunction
    // Each clock: its phase, and whose GNT# was asserted (hb, nic, dsk, or - for none).
    always @(posedge CLK) if (RST_N) begin : truth
        integer t;
        reg [8*4:1] g;
        t = hb.active ? hb.tag : nic.active ? nic.tag : dsk.active ? dsk.tag : -1;
        g = HB_GNT_N === 1'b0 ? "hb" : GNT_N === 1'b0 ? "nic" : DSK_GNT_N === 1'b0 ? "dsk" : "-";
        if (t < 0) $fdisplay(fd, "%0d idle %0s", $time, g);
        else if (t / 1000 == `T_OTHER) $fdisplay(fd, "%0d other %0s", $time, g);
        else $fdisplay(fd, "%0d %0s:%0d %0s", $time, phase_name(t), t % 1000, g);
    end

    initial begin
        if (!$value$plusargs("vcd=%s", vcd)) vcd = "pci_nic_tb.vcd";
        if (!$value$plusargs("cycles=%s", cycles)) cycles = "pci_nic_tb.cycles";
        fd = $fopen(cycles, "w");
        $dumpfile(vcd);
        $dumpvars(0, CLK, RST_N, FRAME_N, IRDY_N, TRDY_N, DEVSEL_N, STOP_N, AD, CBE_N, PAR, REQ_N, GNT_N, INTA_N,
                  HB_REQ_N, HB_GNT_N, DSK_REQ_N, DSK_GNT_N);
        // the driver enabled both causes before the capture
        icr = 0; ims = TXDW | RXT0; nic_tdt = 0; tail = 0; tdh = 0; n_send = 0; n_irq = 0; sent = 0;
        wb_done = 0; received = 0; answered = 0; finished = 0; rx_head = 0; rx_tail = 0;
        req_len[0] = 100;  resp_len[0] = 1400;
        req_len[1] = 64;   resp_len[1] = 60;
        req_len[2] = 1000; resp_len[2] = 300;
        req_len[3] = 300;  resp_len[3] = 1514;
        req_len[4] = 1514; resp_len[4] = 800;
        req_len[5] = 600;  resp_len[5] = 100;
        req_len[6] = 60;   resp_len[6] = 1000;
        req_len[7] = 200;  resp_len[7] = 500;
        repeat (4) @(posedge CLK);
        #(TVAL) RST_N = 1;
        wait (finished == 1);
        repeat (4) @(posedge CLK);
        $fflush(fd);
        $display("END t_ns=%0d sends=%0d interrupts=%0d received=%0d sent=%0d", $time, n_send, n_irq, received, sent);
        $finish;
    end
endmodule
