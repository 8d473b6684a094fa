// Independent PCI bus model for nicrig's decoders (Icarus Verilog).
//
// Written from the PCI Local Bus Specification 3.0, chapter 3 (timing diagrams
// of read/write transactions, DEVSEL# timing, target and master termination,
// 64-bit extension, dual address cycle, fast back-to-back), not from nicrig's
// Python simulator. One 64-bit bus, 33 MHz, one master, one scripted target.
//
//  * pci_master issues the transactions of a script (command, address, data
//    phases wanted, byte enables, IRDY# wait states, REQ64#, fast back-to-back)
//    and reports, per transaction, what it actually observed on the bus:
//      TXN i=.. t_ns=.. cmd=.. addr=.. dac=.. phases=.. bytes=.. term=.. devsel=.. wide=.. stop=..
//    t_ns is the rising CLK edge of the (first) address phase.
//  * pci_target claims (DEVSEL# fast/medium/slow/subtractive, or not at all),
//    inserts TRDY# wait states and terminates (retry, disconnect with / without
//    data, target abort) per its own script, and reports
//      TGT i=.. cmd=.. addr=.. phases=..
//  * Every agent drives its outputs TVAL ns after the rising edge and samples
//    the bus on the rising edge. PAR (PAR64) is driven by the agent that drove
//    AD[31:0] (AD[63:32]) one clock earlier: even parity over AD and C/BE#.
//  * Sustained tri-state lines (FRAME#, IRDY#, TRDY#, DEVSEL#, STOP#, REQ64#,
//    ACK64#) have pull-ups, as have the 64-bit extension lines; AD[31:0],
//    C/BE#[3:0] and PAR float (z) when nobody drives them (no bus parking).
//
// Plusargs: +vcd=FILE (default pci_bus_tb.vcd).
`timescale 1ns/1ps

module pci_master #(parameter TVAL = 2, parameter NT = 32) (
    input  wire        CLK,
    input  wire        RST_N,
    inout  wire [63:0] AD,
    inout  wire [7:0]  CBE_N,
    inout  wire        PAR,
    inout  wire        PAR64,
    inout  wire        FRAME_N,
    inout  wire        IRDY_N,
    inout  wire        REQ64_N,
    input  wire        TRDY_N,
    input  wire        DEVSEL_N,
    input  wire        STOP_N,
    input  wire        ACK64_N
);
    // ---- script (filled by the testbench) --------------------------------------
    reg [3:0]  s_cmd   [0:NT-1];
    reg [63:0] s_addr  [0:NT-1];
    integer    s_nph   [0:NT-1];     // data phases the master wants to transfer
    reg        s_req64 [0:NT-1];     // request a 64-bit transfer
    reg        s_fb2b  [0:NT-1];     // fast back-to-back after the previous (write) transaction
    integer    s_idle  [0:NT-1];     // idle clocks before the address phase
    reg [7:0]  s_be    [0:NT*16-1];  // C/BE#[7:0] of each data phase (active low)
    integer    s_mwait [0:NT*16-1];  // IRDY# wait states before each data phase
    integer    ntx;

    // ---- outputs ----------------------------------------------------------------
    reg [63:0] ad_o;
    reg [7:0]  cbe_o;
    reg ad_lo_oe, ad_hi_oe, cbe_lo_oe, cbe_hi_oe;
    reg frame_o, irdy_o, req64_o, ctl_oe;
    reg par_o, par_oe, par64_o, par64_oe;

    assign AD[31:0]   = ad_lo_oe  ? ad_o[31:0]  : 32'bz;
    assign AD[63:32]  = ad_hi_oe  ? ad_o[63:32] : 32'bz;
    assign CBE_N[3:0] = cbe_lo_oe ? cbe_o[3:0]  : 4'bz;
    assign CBE_N[7:4] = cbe_hi_oe ? cbe_o[7:4]  : 4'bz;
    assign FRAME_N    = ctl_oe ? frame_o : 1'bz;
    assign IRDY_N     = ctl_oe ? irdy_o  : 1'bz;
    assign REQ64_N    = ctl_oe ? req64_o : 1'bz;
    assign PAR        = par_oe   ? par_o   : 1'bz;
    assign PAR64      = par64_oe ? par64_o : 1'bz;

    initial begin
        ntx = 0;
        ad_o = 0; cbe_o = 8'hff; ad_lo_oe = 0; ad_hi_oe = 0; cbe_lo_oe = 0; cbe_hi_oe = 0;
        frame_o = 1; irdy_o = 1; req64_o = 1; ctl_oe = 0;
        par_o = 0; par_oe = 0; par64_o = 0; par64_oe = 0;
    end

    // PAR / PAR64: one clock after the AD half they cover, by whoever drove it.
    // At the rising edge ad_*_oe still hold the previous clock's enables.
    always @(posedge CLK) begin
        par_oe   <= #TVAL ad_lo_oe;
        par_o    <= #TVAL ^{AD[31:0], CBE_N[3:0]};
        par64_oe <= #TVAL ad_hi_oe;
        par64_o  <= #TVAL ^{AD[63:32], CBE_N[7:4]};
    end

    function is_read(input [3:0] c);
        is_read = (c == 4'h0) || (c == 4'h2) || (c == 4'h6) || (c == 4'hA) || (c == 4'hC) || (c == 4'hE);
    endfunction

    function integer lanes(input [7:0] be_n, input wide);
        integer b;
        begin
            lanes = 0;
            for (b = 0; b < (wide ? 8 : 4); b = b + 1)
                if (!be_n[b]) lanes = lanes + 1;
        end
    endfunction

    function [63:0] wdata(input integer i, input integer p);
        reg [31:0] lo;
        begin
            lo = 32'hD0000000 | (i << 12) | (p << 4);
            wdata = {lo ^ 32'h75000001, lo};
        end
    endfunction

    // ---- one transaction ----------------------------------------------------------
    task run(input integer i);
        integer p, nph, k, mw, cnt, nbytes, devsel_clk, t0;
        reg rd, dac, req, wide, stop_seen, stopped, finished, aborted;
        reg s_frame, s_irdy, s_trdy, s_stop, s_devsel, s_ack;
        reg [3:0] cmd;
        reg [63:0] addr;
        reg [8*24:1] term;
        reg [8*12:1] dsp;
        begin
            cmd = s_cmd[i]; addr = s_addr[i]; nph = s_nph[i]; req = s_req64[i];
            rd = is_read(cmd); dac = (addr[63:32] != 0);
            // -- bus acquisition: wait for an idle clock (FRAME# and IRDY# deasserted),
            //    unless this is a fast back-to-back transaction after our own write.
            if (!s_fb2b[i]) begin
                @(posedge CLK);
                ctl_oe <= #TVAL 0;              // sustained tri-state: release after one high clock
                while (!(FRAME_N === 1'b1 && IRDY_N === 1'b1)) @(posedge CLK);
                repeat (s_idle[i]) @(posedge CLK);
            end
            // -- address phase (the first of two with a dual address cycle)
            ctl_oe <= #TVAL 1; frame_o <= #TVAL 0; irdy_o <= #TVAL 1; req64_o <= #TVAL !req;
            ad_lo_oe <= #TVAL 1; cbe_lo_oe <= #TVAL 1;
            ad_o[31:0] <= #TVAL addr[31:0];
            cbe_o[3:0] <= #TVAL dac ? 4'hD : cmd;
            if (req) begin                      // 64-bit extension: reserved, stable, PAR64-covered
                ad_hi_oe <= #TVAL 1; cbe_hi_oe <= #TVAL 1;
                ad_o[63:32] <= #TVAL 32'h0; cbe_o[7:4] <= #TVAL 4'h0;
            end
            @(posedge CLK);
            t0 = $time;
            if (dac) begin                      // second address phase: upper address, real command
                ad_o[31:0] <= #TVAL addr[63:32];
                cbe_o[3:0] <= #TVAL cmd;
                @(posedge CLK);
            end
            // -- first data phase set-up (after the last address phase)
            p = 0; k = 0; cnt = 0; nbytes = 0; devsel_clk = 0; wide = 0;
            stop_seen = 0; stopped = 0; finished = 0; aborted = 0;
            term = "normal";
            mw = s_mwait[i*16];
            cbe_o[3:0] <= #TVAL s_be[i*16][3:0];
            if (req) cbe_o[7:4] <= #TVAL s_be[i*16][7:4];
            if (rd) begin
                ad_lo_oe <= #TVAL 0; ad_hi_oe <= #TVAL 0;   // turnaround: the target drives AD
            end else
                ad_o <= #TVAL wdata(i, 0);
            if (mw == 0) begin
                irdy_o <= #TVAL 0;
                if (nph == 1) begin frame_o <= #TVAL 1; req64_o <= #TVAL 1; end
            end
            while (!finished) begin
                @(posedge CLK);
                k = k + 1;
                s_frame = (FRAME_N === 1'b0); s_irdy = (IRDY_N === 1'b0); s_trdy = (TRDY_N === 1'b0);
                s_stop = (STOP_N === 1'b0); s_devsel = (DEVSEL_N === 1'b0); s_ack = (ACK64_N === 1'b0);
                if (devsel_clk == 0 && s_devsel) begin
                    devsel_clk = k;
                    wide = req && s_ack;
                end
                if (s_stop) stop_seen = 1;
                if (devsel_clk == 0 && !aborted && k >= 4) begin
                    // No DEVSEL# through the subtractive decode clock: master abort.
                    aborted = 1; term = "master_abort";
                    if (s_frame) begin
                        frame_o <= #TVAL 1; req64_o <= #TVAL 1; irdy_o <= #TVAL 0;
                    end else
                        finished = 1;
                end else if (aborted) begin
                    finished = 1;                // FRAME# went high with IRDY# low: now release IRDY#
                end else if (s_irdy && (s_trdy || s_stop)) begin
                    // this clock completes a data phase
                    if (s_trdy) begin
                        cnt = cnt + 1;
                        nbytes = nbytes + lanes(wide ? s_be[i*16+p] : {4'hf, s_be[i*16+p][3:0]}, wide);
                    end
                    if (s_stop && !stopped) begin
                        stopped = 1;
                        if (!s_devsel)   term = "target_abort";
                        else if (s_trdy) term = "disconnect_with_data";
                        else if (cnt == 0) term = "retry";
                        else             term = "disconnect_without_data";
                    end
                    if (!s_frame)
                        finished = 1;
                    else if (stopped) begin
                        // terminated by the target: end with FRAME# high, IRDY# still low
                        frame_o <= #TVAL 1; req64_o <= #TVAL 1;
                    end else begin
                        p = p + 1;
                        mw = s_mwait[i*16+p];
                        cbe_o[3:0] <= #TVAL s_be[i*16+p][3:0];
                        if (req) cbe_o[7:4] <= #TVAL s_be[i*16+p][7:4];
                        if (!rd) ad_o <= #TVAL wdata(i, p);
                        if (mw == 0) begin
                            if (p == nph - 1) begin frame_o <= #TVAL 1; req64_o <= #TVAL 1; end
                        end else
                            irdy_o <= #TVAL 1;
                    end
                end else if (!s_irdy) begin
                    // master wait states: IRDY# stays high for mw clocks
                    if (mw > 0) mw = mw - 1;
                    if (mw == 0) begin
                        irdy_o <= #TVAL 0;
                        // the last data phase, or STOP# seen: FRAME# goes high with IRDY# low
                        if (p == nph - 1 || stop_seen) begin frame_o <= #TVAL 1; req64_o <= #TVAL 1; end
                    end
                end
            end
            // -- the transaction is over: deassert, release AD / C/BE#
            irdy_o <= #TVAL 1; frame_o <= #TVAL 1; req64_o <= #TVAL 1;
            ad_lo_oe <= #TVAL 0; ad_hi_oe <= #TVAL 0; cbe_lo_oe <= #TVAL 0; cbe_hi_oe <= #TVAL 0;
            case (devsel_clk)
                0: dsp = "none";
                1: dsp = "fast";
                2: dsp = "medium";
                3: dsp = "slow";
                default: dsp = "subtractive";
            endcase
            $display("TXN i=%0d t_ns=%0d cmd=%0d addr=0x%0h dac=%0d phases=%0d bytes=%0d term=%0s devsel=%0s wide=%0d stop=%0d",
                     i, t0, cmd, addr, dac, cnt, nbytes, term, dsp, wide, stop_seen);
        end
    endtask

    task run_all;
        integer i;
        begin
            for (i = 0; i < ntx; i = i + 1) run(i);
        end
    endtask
endmodule


module pci_target #(parameter TVAL = 2, parameter NT = 32) (
    input  wire        CLK,
    input  wire        RST_N,
    inout  wire [63:0] AD,
    input  wire [7:0]  CBE_N,
    inout  wire        PAR,
    inout  wire        PAR64,
    input  wire        FRAME_N,
    input  wire        IRDY_N,
    input  wire        REQ64_N,
    inout  wire        TRDY_N,
    inout  wire        DEVSEL_N,
    inout  wire        STOP_N,
    inout  wire        ACK64_N
);
    localparam NORMAL = 0, RETRY = 1, DISC_WITH = 2, DISC_WITHOUT = 3, ABORT = 4;
    localparam IDLE = 0, DAC2 = 1, ACTIVE = 2, IGNORE = 3;

    // ---- script, indexed by the number of address phases seen -------------------
    integer s_devsel  [0:NT-1];     // 0: not claimed, 1 fast, 2 medium, 3 slow, 4 subtractive
    integer s_term    [0:NT-1];
    integer s_term_at [0:NT-1];     // data phase (0-based) on which STOP# is signalled
    reg     s_ack64   [0:NT-1];     // answer REQ64# with ACK64#
    integer s_twait   [0:NT*16-1];  // TRDY# wait states before each data phase

    reg [63:0] ad_o;
    reg ad_lo_oe, ad_hi_oe, ack64_o;
    reg par_o, par_oe, par64_o, par64_oe;
    assign AD[31:0]  = ad_lo_oe ? ad_o[31:0]  : 32'bz;
    assign AD[63:32] = ad_hi_oe ? ad_o[63:32] : 32'bz;
    assign PAR       = par_oe   ? par_o   : 1'bz;
    assign PAR64     = par64_oe ? par64_o : 1'bz;
    `include "pci_target_phases.vh"
    assign ACK64_N   = ctl_oe ? ack64_o  : 1'bz;

    integer state, idx, ntx, r0;
    reg f_prev, rd, req, ack, done;
    reg [3:0] cmd;
    reg [63:0] addr;

    initial begin
        ad_o = 0; ad_lo_oe = 0; ad_hi_oe = 0; ack64_o = 1;
        par_o = 0; par_oe = 0; par64_o = 0; par64_oe = 0;
        state = IDLE; ntx = 0; f_prev = 0;
    end

    always @(posedge CLK) begin
        par_oe   <= #TVAL ad_lo_oe;
        par_o    <= #TVAL ^{AD[31:0], CBE_N[3:0]};
        par64_oe <= #TVAL ad_hi_oe;
        par64_o  <= #TVAL ^{AD[63:32], CBE_N[7:4]};
    end

    function is_read(input [3:0] c);
        is_read = (c == 4'h0) || (c == 4'h2) || (c == 4'h6) || (c == 4'hA) || (c == 4'hC) || (c == 4'hE);
    endfunction

    function [63:0] rdata(input [63:0] a, input integer ph);
        reg [31:0] lo;
        begin
            lo = a[31:0] + ph * 8;
            rdata = {~lo, lo} ^ 64'h5a5a_0000_0000_3c3c;
        end
    endfunction

    task respond;   // TRDY# / STOP# (/ DEVSEL#) for data phase p
        begin
            if (s_term[idx] != NORMAL && p == s_term_at[idx]) begin
                stopping = 1;
                case (s_term[idx])
                    DISC_WITH: begin trdy_o <= #TVAL 0; stop_o <= #TVAL 0; end
                    ABORT: begin
                        trdy_o <= #TVAL 1; stop_o <= #TVAL 0; devsel_o <= #TVAL 1; ack64_o <= #TVAL 1;
                    end
                    default: begin trdy_o <= #TVAL 1; stop_o <= #TVAL 0; end   // retry / disconnect w/o data
                endcase
            end else
                trdy_o <= #TVAL 0;
        end
    endtask

    task next_phase;   // the script's TRDY# wait states before each data phase
        begin
            resp_at = k + s_twait[idx*16+p];
            if (rd) ad_o <= #TVAL rdata(addr, p);
        end
    endtask

    task devsel_asserted;
        ack64_o <= #TVAL !ack;
    endtask

    task drive_ad;
        begin
            ad_lo_oe <= #TVAL 1;
            if (ack) ad_hi_oe <= #TVAL 1;
        end
    endtask

    task claim;
        begin
            rd = is_read(cmd); devsel = s_devsel[idx];
            start_phases;
            ack = req && s_ack64[idx];
            if (devsel == 0)
                state = IGNORE;
            else begin
                state = ACTIVE;
                // TRDY# may be asserted together with DEVSEL#, on a read not before the turnaround
                r0 = (devsel > (rd ? 2 : 1)) ? devsel : (rd ? 2 : 1);
                resp_at = r0 - 1 + s_twait[idx*16];
                ad_o <= #TVAL rdata(addr, 0);
                drive_tick;
            end
        end
    endtask

    task finish;
        begin
            ack64_o <= #TVAL 1; ad_lo_oe <= #TVAL 0; ad_hi_oe <= #TVAL 0;
            state = IDLE;
            $display("TGT i=%0d cmd=%0d addr=0x%0h phases=%0d", idx, cmd, addr, cnt);
        end
    endtask

    always @(posedge CLK) begin : fsm
        sample_control;
        if (!RST_N)
            state = IDLE;
        else case (state)
            IDLE:
                if (f && !f_prev) begin            // address phase
                    idx = ntx; ntx = ntx + 1;
                    cmd = CBE_N[3:0]; addr = {32'h0, AD[31:0]}; req = (REQ64_N === 1'b0);
                    if (cmd == 4'hD) state = DAC2; else claim;
                end
            DAC2: begin                            // second address phase of a DAC
                cmd = CBE_N[3:0]; addr[63:32] = AD[31:0];
                claim;
            end
            IGNORE:
                if (!f && !ir) state = IDLE;
            ACTIVE: begin
                data_phase(done);
                if (done) finish;
            end
        endcase
        f_prev = f;
    end
endmodule


module pci_bus_tb;
    parameter TVAL = 2;         // clock-to-output delay of every agent, ns (iverilog -Ppci_bus_tb.TVAL=..)
    localparam NT = 32;
    localparam NORMAL = 0, RETRY = 1, DISC_WITH = 2, DISC_WITHOUT = 3, ABORT = 4;
    localparam FAST = 1, MEDIUM = 2, SLOW = 3, SUBTR = 4, NONE = 0;
    localparam IACK = 4'h0, SPCYC = 4'h1, IORD = 4'h2, IOWR = 4'h3, MRD = 4'h6, MWR = 4'h7, CFGRD = 4'hA, CFGWR = 4'hB,
               MRM = 4'hC, MRL = 4'hE, MWI = 4'hF;

    reg CLK = 0;
    reg RST_N = 0;
    tri  [63:0] AD;
    tri  [7:0]  CBE_N;
    tri         PAR, PAR64;
    tri1        FRAME_N, IRDY_N, TRDY_N, DEVSEL_N, STOP_N, REQ64_N, ACK64_N;

    // the system board's pull-ups on the 64-bit extension
    genvar g;
    generate
        for (g = 32; g < 64; g = g + 1) begin : pu_ad
            pullup (AD[g]);
        end
        for (g = 4; g < 8; g = g + 1) begin : pu_cbe
            pullup (CBE_N[g]);
        end
    endgenerate
    pullup (PAR64);

    always #15 CLK = ~CLK;      // 30 ns: 33.33 MHz

    pci_master #(.TVAL(TVAL), .NT(NT)) m (.CLK(CLK), .RST_N(RST_N), .AD(AD), .CBE_N(CBE_N), .PAR(PAR), .PAR64(PAR64),
        .FRAME_N(FRAME_N), .IRDY_N(IRDY_N), .REQ64_N(REQ64_N),
        .TRDY_N(TRDY_N), .DEVSEL_N(DEVSEL_N), .STOP_N(STOP_N), .ACK64_N(ACK64_N));
    pci_target #(.TVAL(TVAL), .NT(NT)) t (.CLK(CLK), .RST_N(RST_N), .AD(AD), .CBE_N(CBE_N), .PAR(PAR), .PAR64(PAR64),
        .FRAME_N(FRAME_N), .IRDY_N(IRDY_N), .REQ64_N(REQ64_N),
        .TRDY_N(TRDY_N), .DEVSEL_N(DEVSEL_N), .STOP_N(STOP_N), .ACK64_N(ACK64_N));

    // ---- script helpers --------------------------------------------------------------
    integer n;
    task txn(input [3:0] cmd, input [63:0] addr, input integer nph, input req64, input fb2b);
        integer q;
        begin
            n = m.ntx; m.ntx = m.ntx + 1;
            m.s_cmd[n] = cmd; m.s_addr[n] = addr; m.s_nph[n] = nph; m.s_req64[n] = req64;
            m.s_fb2b[n] = fb2b; m.s_idle[n] = 1;
            for (q = 0; q < 16; q = q + 1) begin
                m.s_be[n*16+q] = 8'h00; m.s_mwait[n*16+q] = 0; t.s_twait[n*16+q] = 0;
            end
            t.s_devsel[n] = FAST; t.s_term[n] = NORMAL; t.s_term_at[n] = 0; t.s_ack64[n] = 0;
        end
    endtask
    task tgt(input integer devsel, input integer term, input integer term_at, input ack64);
        begin
            t.s_devsel[n] = devsel; t.s_term[n] = term; t.s_term_at[n] = term_at; t.s_ack64[n] = ack64;
        end
    endtask
    task be(input integer p, input [7:0] be_n);    m.s_be[n*16+p] = be_n;    endtask
    task mwait(input integer p, input integer c);  m.s_mwait[n*16+p] = c;    endtask
    task twait(input integer p, input integer c);  t.s_twait[n*16+p] = c;    endtask
    task idle(input integer c);                    m.s_idle[n] = c;          endtask

    reg [8*256:1] vcd;
    initial begin
        if (!$value$plusargs("vcd=%s", vcd)) vcd = "pci_bus_tb.vcd";
        $dumpfile(vcd);
        $dumpvars(0, CLK, RST_N, FRAME_N, IRDY_N, TRDY_N, DEVSEL_N, STOP_N, AD, CBE_N, PAR, PAR64,
                  REQ64_N, ACK64_N);

        // ---- the script -------------------------------------------------------------
        // configuration (type 0, IDSEL on AD[16]): write the 16-bit command register
        txn(CFGWR, 64'h0001_0004, 1, 0, 0);  be(0, 8'h0c);  tgt(MEDIUM, NORMAL, 0, 0);  twait(0, 1);
        // configuration read of the ID register, slow DEVSEL#, target waits
        txn(CFGRD, 64'h0001_0000, 1, 0, 0);  tgt(SLOW, NORMAL, 0, 0);  twait(0, 2);
        // configuration read of an absent device: master abort
        txn(CFGRD, 64'h0080_0000, 1, 0, 0);  tgt(NONE, NORMAL, 0, 0);
        // memory write burst: master and target wait states, a partial phase
        txn(MWR, 64'hfe00_0000, 4, 0, 0);  be(2, 8'h0c);  mwait(2, 2);  twait(1, 1);
        // fast back-to-back write to the same target, medium DEVSEL#
        txn(MWR, 64'hfe00_0100, 2, 0, 1);  tgt(MEDIUM, NORMAL, 0, 0);  be(1, 8'h0e);
        // memory read burst: turnaround, target and master wait states
        txn(MRD, 64'hfe00_0200, 3, 0, 0);  tgt(MEDIUM, NORMAL, 0, 0);  twait(0, 1);  twait(2, 2);  mwait(1, 1);
        // I/O write of one byte (AD[1:0] = 01, BE# = 1101), slow DEVSEL#
        txn(IOWR, 64'h0000_e801, 1, 0, 0);  be(0, 8'h0d);  tgt(SLOW, NORMAL, 0, 0);
        // I/O read of two bytes at 0xe802
        txn(IORD, 64'h0000_e802, 1, 0, 0);  be(0, 8'h03);
        // Interrupt Acknowledge (the address is a don't care, driven stable): vector read
        txn(IACK, 64'h0000_0000, 1, 0, 0);  be(0, 8'h0e);  twait(0, 1);
        // Special Cycle broadcast: nobody asserts DEVSEL#, it ends with master abort
        txn(SPCYC, 64'h0000_0000, 1, 0, 0);  tgt(NONE, NORMAL, 0, 0);
        // Memory Read Multiple, target disconnects with data on the 5th phase
        txn(MRM, 64'h8000_1000, 8, 0, 0);  tgt(FAST, DISC_WITH, 4, 0);  twait(3, 1);
        // Memory Write and Invalidate: one 8-DWORD cache line, all bytes
        txn(MWI, 64'h8000_2000, 8, 0, 0);  mwait(0, 1);
        // Memory Read Line with target wait states on every phase
        txn(MRL, 64'h8000_3000, 4, 0, 0);  tgt(MEDIUM, NORMAL, 0, 0);
            twait(0, 1); twait(1, 1); twait(2, 1); twait(3, 1);
        // 64-bit memory write, REQ64# / ACK64#, last phase only the low DWORD
        txn(MWR, 64'h8000_4000, 4, 1, 0);  tgt(FAST, NORMAL, 0, 1);  be(3, 8'hf0);  mwait(1, 1);
        // REQ64# memory read to a 32-bit target (no ACK64#): 32-bit phases
        txn(MRD, 64'h8000_5000, 3, 1, 0);  tgt(MEDIUM, NORMAL, 0, 0);
        // 64-bit Memory Read Multiple with ACK64#, target waits
        txn(MRM, 64'h8000_6000, 4, 1, 0);  tgt(SLOW, NORMAL, 0, 1);  twait(2, 2);
        // dual address cycle: memory read above 4 GB
        txn(MRD, 64'h0000_0001_2345_6780, 2, 0, 0);  tgt(MEDIUM, NORMAL, 0, 0);
        // dual address cycle: memory write of 3 bytes, fast
        txn(MWR, 64'h0000_00ff_0000_1000, 1, 0, 0);  be(0, 8'h08);
        // target retry on a memory read
        txn(MRD, 64'hfe00_0300, 2, 0, 0);  tgt(MEDIUM, RETRY, 0, 0);
        // memory write: disconnect without data on the 3rd phase, while the master waits
        txn(MWR, 64'hfe00_0400, 6, 0, 0);  tgt(FAST, DISC_WITHOUT, 2, 0);  mwait(2, 2);
        // memory write: target abort after one data phase
        txn(MWR, 64'hfe00_0500, 3, 0, 0);  tgt(FAST, ABORT, 1, 0);
        // I/O write with byte enables the target rejects: target abort, no data
        txn(IOWR, 64'h0000_e900, 1, 0, 0);  be(0, 8'h0a);  tgt(MEDIUM, ABORT, 0, 0);  twait(0, 1);
        // memory read burst nobody claims: master abort
        txn(MRD, 64'hc000_0000, 4, 0, 0);  tgt(NONE, NORMAL, 0, 0);  idle(3);
        // memory read claimed by subtractive decode
        txn(MRD, 64'hd000_0000, 2, 0, 0);  tgt(SUBTR, NORMAL, 0, 0);
        // memory read burst: disconnect with data on the first phase, slow DEVSEL#
        txn(MRD, 64'hfe00_0600, 4, 0, 0);  tgt(SLOW, DISC_WITH, 0, 0);
        // master wait before the first phase of a write, last phase while the target waits
        txn(MWR, 64'hfe00_0700, 2, 0, 0);  mwait(0, 2);  twait(1, 3);

        repeat (3) @(posedge CLK);
        #(TVAL) RST_N = 1;
        repeat (2) @(posedge CLK);
        m.run_all;
        repeat (6) @(posedge CLK);
        $display("END t_ns=%0d transactions=%0d target_saw=%0d", $time, m.ntx, t.ntx);
        $finish;
    end
endmodule
