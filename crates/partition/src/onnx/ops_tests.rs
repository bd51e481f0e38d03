//! Shape inference and FLOPs of the supported ONNX operators, operator by operator.
use super::*;

#[test]
fn broadcasting_follows_numpy() {
    assert_eq!(broadcast(&[&[8, 1, 6], &[7, 1]]).unwrap(), vec![8, 7, 6]);
    assert!(broadcast(&[&[3], &[4]]).is_err());
}

#[test]
fn window_sizes() {
    // 32 wide, kernel 3, stride 1, padding 1+1: 32; kernel 2, stride 2: 16.
    assert_eq!(window_out(32, 3, 1, 1, 2, false).unwrap(), 32);
    assert_eq!(window_out(32, 2, 2, 1, 0, false).unwrap(), 16);
    // ceil mode: (5 - 2) / 2 + 1 = 2 floor, 3 ceil.
    assert_eq!(window_out(5, 2, 2, 1, 0, true).unwrap(), 3);
}
