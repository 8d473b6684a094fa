// Independent GMII transmit model for nicrig's decoders (Icarus Verilog).
//
// A MAC transmitter per IEEE 802.3 clause 4 / clause 35 at 125 MHz, written from
// the standard, not from nicrig's Python code:
//  * frames come from a memory image (+frames=FILE, hex, one octet a line):
//      per frame   LEN_HI LEN_LO FLAGS ERR_HI ERR_LO IFG  then LEN octets (DA .. end of data, no FCS)
//      end         00 00
//    FLAGS bit 0: corrupt the FCS (last FCS octet inverted);
//    FLAGS bit 1: assert TX_ER on octet ERR (index counted from the first octet after the SFD);
//    IFG: idle clocks (TX_EN low) before the frame; the MAC never sends fewer than 12 (96 bit times).
//  * the MAC pads the data field to the 60-octet minimum (64 with the FCS, 4.2.3.3),
//    computes the FCS itself with a bit-serial CRC-32 shift register (3.2.9: the first
//    32 bits complemented, i.e. register preset to ones; generator 0x04C11DB7; bits fed
//    in transmission order, LSB of each octet first; the complemented remainder sent
//    x^31 first), and sends preamble 7 x 0x55, SFD 0xD5, the frame, the FCS;
//  * TX_EN, TX_ER and TXD<7:0> change TCO ns after the rising edge of GTX_CLK.
// It logs every frame it sent:
//      FRAME i=.. t_ns=.. len=.. fcs=o0o1o2o3 bad_fcs=.. er_octet=.. ifg=..
// t_ns is the GTX_CLK edge that samples the first preamble octet; len counts DA .. FCS;
// fcs lists the four FCS octets in the order sent; er_octet is -1 without TX_ER.
//
// Plusargs: +frames=FILE (default frames.hex), +vcd=FILE (default gmii_mac_tb.vcd).
`timescale 1ns/1ps

module gmii_mac_tb;
    parameter TCO = 1;          // ns, clock to output

    reg GTX_CLK = 0;
    reg TX_EN = 0;
    reg TX_ER = 0;
    reg [7:0] TXD = 8'h00;

    always #4 GTX_CLK = ~GTX_CLK;   // 8 ns: 125 MHz

    reg [7:0]  mem   [0:16383];
    reg [7:0]  frame [0:2047];
    reg [31:0] crc;

    // drive one octet for the next clock
    task octet(input [7:0] d, input en, input er);
        begin
            @(posedge GTX_CLK);
            TX_EN <= #TCO en;
            TX_ER <= #TCO er;
            TXD   <= #TCO d;
        end
    endtask

    // 802.3 3.2.9 shift register, one octet, LSB (first transmitted bit) first
    task crc_octet(input [7:0] d);
        integer b;
        reg fb;
        begin
            for (b = 0; b < 8; b = b + 1) begin
                fb  = crc[31] ^ d[b];
                crc = {crc[30:0], 1'b0} ^ (fb ? 32'h04C11DB7 : 32'h0);
            end
        end
    endtask

    reg [8*256:1] frames_file, vcd_file;
    integer ptr, len, flags, er_at, ifg, j, q, b, nf, t0, fd;
    reg [7:0] v;
    reg [31:0] fcs;

    initial begin
        if (!$value$plusargs("frames=%s", frames_file)) frames_file = "frames.hex";
        if (!$value$plusargs("vcd=%s", vcd_file)) vcd_file = "gmii_mac_tb.vcd";
        for (j = 0; j < 16384; j = j + 1) mem[j] = 8'h00;
        fd = $fopen(frames_file, "r");
        if (fd == 0) begin $display("ERROR cannot open %0s", frames_file); $finish; end
        j = 0;
        while (j < 16384 && $fscanf(fd, "%h", v) == 1) begin mem[j] = v; j = j + 1; end
        $fclose(fd);
        $dumpfile(vcd_file);
        $dumpvars(0, GTX_CLK, TX_EN, TX_ER, TXD);

        ptr = 0; nf = 0;
        repeat (4) octet(8'h00, 0, 0);
        while ({mem[ptr], mem[ptr+1]} != 16'h0000) begin
            len = {mem[ptr], mem[ptr+1]}; flags = mem[ptr+2]; er_at = {mem[ptr+3], mem[ptr+4]}; ifg = mem[ptr+5];
            ptr = ptr + 6;
            for (j = 0; j < len; j = j + 1) frame[j] = mem[ptr+j];
            ptr = ptr + len;
            while (len < 60) begin frame[len] = 8'h00; len = len + 1; end      // pad
            crc = 32'hFFFF_FFFF;
            for (j = 0; j < len; j = j + 1) crc_octet(frame[j]);
            fcs = ~crc;
            for (q = 0; q < 4; q = q + 1)
                for (b = 0; b < 8; b = b + 1)
                    frame[len+q][b] = fcs[31 - 8*q - b];                    // x^31 first on the wire
            if (flags & 1) frame[len+3] = ~frame[len+3];
            len = len + 4;
            if (ifg < 12) ifg = 12;
            repeat (ifg) octet(8'h00, 0, 0);
            octet(8'h55, 1, 0);
            t0 = $time + 8;
            repeat (6) octet(8'h55, 1, 0);
            octet(8'hD5, 1, 0);
            for (j = 0; j < len; j = j + 1)
                octet(frame[j], 1, ((flags & 2) != 0) && (j == er_at));
            $display("FRAME i=%0d t_ns=%0d len=%0d fcs=%02x%02x%02x%02x bad_fcs=%0d er_octet=%0d ifg=%0d",
                     nf, t0, len, frame[len-4], frame[len-3], frame[len-2], frame[len-1], flags & 1,
                     (flags & 2) ? er_at : -1, ifg);
            nf = nf + 1;
        end
        repeat (16) octet(8'h00, 0, 0);
        $display("END t_ns=%0d frames=%0d", $time, nf);
        $finish;
    end
endmodule
