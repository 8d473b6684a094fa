// The data phases of a PCI target: the part of a target's state machine that every target shares,
// `include'd by the targets of pci_bus_tb.v and pci_nic_tb.v (iverilog -I tests/hdl). What a target
// claims, its wait states, when it stops and what it reports stay the including model's own.
//
// Written from the PCI Local Bus Specification 2.3, §3.2.2 (sustained tri-state: a line driven high
// for one clock, then released), §3.3.1 / §3.3.2 (read turnaround, DEVSEL# timing, TRDY#), §3.3.3.2
// (target termination: STOP# held until FRAME# is deasserted, TRDY# deasserted with it):
//  * DEVSEL# goes low ``devsel - 1`` clocks after the (last) address phase (devsel: 1 fast, 2 medium,
//    3 slow, 4 subtractive decode); on a read, AD is driven from the clock after the turnaround one;
//  * data phase ``p`` is answered from clock ``resp_at`` on (``k`` counts clocks after the address
//    phase); a data phase completes on a clock with IRDY# and TRDY# or STOP# low; ``cnt`` counts those
//    that moved data (TRDY#);
//  * after the final data phase (FRAME# high) TRDY#, STOP# and DEVSEL# are driven high for one clock,
//    then released.
//
// The including module has the ports CLK, FRAME_N, IRDY_N, TRDY_N, DEVSEL_N, STOP_N and the parameter
// TVAL (clock to output, ns), and provides:
//   reg rd                 the claimed transaction is a read
//   task respond           TRDY# / STOP# of data phase p (and a read's data when it drives it then)
//   task next_phase        resp_at (and a read's data) of data phase p, once the previous one completed
//   task devsel_asserted   what it drives together with DEVSEL# beyond it (ACK64#), if anything
//   task drive_ad          AD enabled for a read's data
// It calls sample_control first on every rising edge, start_phases when it claims a transaction, then
// drive_tick on that clock and data_phase on each following one until data_phase says the transaction
// ended (the module then releases AD and reports).

reg trdy_o, devsel_o, stop_o, ctl_oe;
assign TRDY_N   = ctl_oe ? trdy_o   : 1'bz;
assign DEVSEL_N = ctl_oe ? devsel_o : 1'bz;
assign STOP_N   = ctl_oe ? stop_o   : 1'bz;

reg f, ir, tr, st;                   // FRAME#, IRDY#, TRDY#, STOP# asserted at this rising edge
integer devsel;                      // DEVSEL# timing of the claimed transaction
integer k, p, cnt, resp_at;
reg responding, stopping, ad_on, release_ctl;

initial begin
    trdy_o = 1; devsel_o = 1; stop_o = 1; ctl_oe = 0;
    responding = 0; stopping = 0; ad_on = 0; release_ctl = 0;
end

task sample_control;
    begin
        f = (FRAME_N === 1'b0); ir = (IRDY_N === 1'b0); tr = (TRDY_N === 1'b0); st = (STOP_N === 1'b0);
        if (release_ctl) begin ctl_oe <= #TVAL 0; release_ctl = 0; end   // driven high one clock, then released
    end
endtask

task start_phases;
    begin
        k = 0; p = 0; cnt = 0; stopping = 0; responding = 0; ad_on = 0;
    end
endtask

task drive_tick;     // the lines of clock k after the address phase
    begin
        if (k == devsel - 1) begin
            ctl_oe <= #TVAL 1; devsel_o <= #TVAL 0;
            devsel_asserted;
        end
        if (rd && !ad_on && k >= 1 && k >= devsel - 1) begin   // after the turnaround clock
            ad_on = 1;
            drive_ad;
        end
        if (!responding && k >= resp_at) begin
            respond;
            responding = 1;
        end
    end
endtask

task data_phase(output done);   // one clock of a claimed transaction; done: its final data phase completed
    begin
        done = 0;
        k = k + 1;
        if (ir && (tr || st)) begin            // a data phase completes
            if (tr) cnt = cnt + 1;
            if (!f) begin                      // the final one
                trdy_o <= #TVAL 1; stop_o <= #TVAL 1; devsel_o <= #TVAL 1;
                release_ctl = 1;
                done = 1;
            end else if (stopping)
                trdy_o <= #TVAL 1;             // STOP# held until FRAME# is deasserted
            else begin
                p = p + 1;
                responding = 0;
                next_phase;
                if (resp_at > k) trdy_o <= #TVAL 1;
                drive_tick;
            end
        end else
            drive_tick;
    end
endtask
