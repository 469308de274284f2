//! QR codes as inline SVG (the NodeId, a pairing code), drawn by `qrcode`.
//!
//! Must never: put the encoded text into the SVG (only dark modules are
//! drawn), so the SVG is safe to place in a page unescaped.

use qrcode::render::svg;
use qrcode::{EcLevel, QrCode};

/// `data` as an SVG QR code, or `None` if it is too long for one.
pub fn svg(data: &str) -> Option<String> {
    let code = QrCode::with_error_correction_level(data.as_bytes(), EcLevel::M).ok()?;
    Some(
        code.render::<svg::Color<'_>>()
            .min_dimensions(180, 180)
            .quiet_zone(true)
            .build(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_svg_holds_no_text_of_the_data() {
        let s = super::svg("<script>alert(1)</script>").expect("fits");
        assert!(s.starts_with("<?xml") || s.starts_with("<svg"), "{s:.40}");
        assert!(!s.contains("script"));
    }
}
