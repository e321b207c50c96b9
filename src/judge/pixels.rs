//! Framebuffer PNGs decoded within bounds, one at a time: the host's recheck hashes their
//! pixels, and the review page compares each with the dump-time one (the pixels that differ
//! counted and boxed, and a diff image that shows them in magenta over a dimmed copy of the
//! reference, with the box outlined). A PNG is a guest's file, so its header is held against
//! the caps before any buffer is made, and the png crate's own allocations are limited too.

use anyhow::{bail, Context, Result};

/// The widest or tallest image decoded. The guest's framebuffer is 640x480.
pub const MAX_SIDE: u32 = 8192;
/// The most pixels decoded: 4096x4096.
pub const MAX_PIXELS: u64 = 1 << 24;
/// The largest buffer a decode makes, and the png crate's own limit.
pub const MAX_DECODED_BYTES: usize = 64 << 20;

/// An image as 8-bit RGB.
#[derive(Debug, Clone, PartialEq)]
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

/// Why the declared size of an image is refused, before anything is decoded.
pub fn size_problem(width: u32, height: u32) -> Option<String> {
    let pixels = u64::from(width) * u64::from(height);
    (width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE || pixels > MAX_PIXELS)
        .then(|| {
            format!(
                "the PNG declares {width}x{height} pixels; this rig decodes at most \
                 {MAX_SIDE} a side and {MAX_PIXELS} in all"
            )
        })
}

pub fn decode(bytes: &[u8]) -> Result<Rgb> {
    let mut d = png::Decoder::new_with_limits(
        std::io::Cursor::new(bytes),
        png::Limits {
            bytes: MAX_DECODED_BYTES,
        },
    );
    d.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    // The declared size, from IHDR alone, before anything else is read.
    let (w, h) = d
        .read_header_info()
        .map(|i| (i.width, i.height))
        .context("reading the PNG header")?;
    if let Some(why) = size_problem(w, h) {
        bail!("{why}");
    }
    let mut r = d.read_info().context("reading the PNG")?;
    let size = r.output_buffer_size();
    if size > MAX_DECODED_BYTES {
        bail!(
            "the PNG decodes to {size} bytes, more than the {MAX_DECODED_BYTES} this rig decodes"
        );
    }
    let mut buf = vec![0; size];
    let info = r.next_frame(&mut buf).context("decoding the PNG")?;
    buf.truncate(info.buffer_size());
    let px = (info.width as usize) * (info.height as usize);
    let data = match info.color_type {
        png::ColorType::Rgb => buf,
        png::ColorType::Rgba => buf
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        png::ColorType::Grayscale => buf.iter().flat_map(|g| [*g, *g, *g]).collect(),
        png::ColorType::GrayscaleAlpha => buf
            .chunks_exact(2)
            .flat_map(|p| [p[0], p[0], p[0]])
            .collect(),
        png::ColorType::Indexed => bail!("an indexed PNG was not expanded"),
    };
    if data.len() != px * 3 {
        bail!("the PNG decoded to {} bytes for {px} pixels", data.len());
    }
    Ok(Rgb {
        width: info.width,
        height: info.height,
        data,
    })
}

pub fn encode(img: &Rgb) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut e = png::Encoder::new(&mut out, img.width, img.height);
        e.set_color(png::ColorType::Rgb);
        e.set_depth(png::BitDepth::Eight);
        let mut w = e.write_header().context("writing a PNG header")?;
        w.write_image_data(&img.data).context("writing PNG data")?;
    }
    Ok(out)
}

/// Where two images differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    pub changed: usize,
    /// (x0, y0, x1, y1), inclusive; None when nothing changed.
    pub bbox: Option<(u32, u32, u32, u32)>,
    pub image: Rgb,
}

impl Diff {
    pub fn describe(&self) -> String {
        match self.bbox {
            None => "identical pixels".into(),
            Some((x0, y0, x1, y1)) => format!(
                "{} pixels differ, all inside x {x0}..{x1}, y {y0}..{y1} ({}x{})",
                self.changed,
                x1 - x0 + 1,
                y1 - y0 + 1
            ),
        }
    }
}

const MAGENTA: [u8; 3] = [255, 0, 255];
const BOX: [u8; 3] = [0, 160, 255];

/// Compares `b` with the reference `a`; images of different sizes are not compared.
pub fn diff(a: &Rgb, b: &Rgb) -> Result<Diff> {
    if (a.width, a.height) != (b.width, b.height) {
        bail!(
            "sizes differ: {}x{} against {}x{}",
            b.width,
            b.height,
            a.width,
            a.height
        );
    }
    let w = a.width as usize;
    let mut out = Vec::with_capacity(a.data.len());
    let mut changed = 0;
    let mut bbox: Option<(u32, u32, u32, u32)> = None;
    for (i, (pa, pb)) in a
        .data
        .chunks_exact(3)
        .zip(b.data.chunks_exact(3))
        .enumerate()
    {
        if pa == pb {
            // Dimmed towards white, so the changes stand out and the layout stays readable.
            out.extend(pa.iter().map(|c| 192 + c / 4));
        } else {
            changed += 1;
            out.extend(MAGENTA);
            let (x, y) = ((i % w) as u32, (i / w) as u32);
            bbox = Some(match bbox {
                None => (x, y, x, y),
                Some((x0, y0, x1, y1)) => (x0.min(x), y0.min(y), x1.max(x), y1.max(y)),
            });
        }
    }
    if let Some((x0, y0, x1, y1)) = bbox {
        // The box's outline one pixel outside the changed area, where the image has room.
        let (bx0, by0) = (x0.saturating_sub(1), y0.saturating_sub(1));
        let (bx1, by1) = ((x1 + 1).min(a.width - 1), (y1 + 1).min(a.height - 1));
        for y in by0..=by1 {
            for x in bx0..=bx1 {
                let edge = x == bx0 || x == bx1 || y == by0 || y == by1;
                let inside = x >= x0 && x <= x1 && y >= y0 && y <= y1;
                if edge && !inside {
                    let at = (y as usize * w + x as usize) * 3;
                    out[at..at + 3].copy_from_slice(&BOX);
                }
            }
        }
    }
    Ok(Diff {
        changed,
        bbox,
        image: Rgb {
            width: a.width,
            height: a.height,
            data: out,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(w: u32, h: u32, f: impl Fn(u32, u32) -> [u8; 3]) -> Rgb {
        let mut data = Vec::new();
        for y in 0..h {
            for x in 0..w {
                data.extend(f(x, y));
            }
        }
        Rgb {
            width: w,
            height: h,
            data,
        }
    }

    #[test]
    fn a_mark_is_counted_and_boxed() {
        let a = img(20, 10, |_, _| [10, 20, 30]);
        let b = img(20, 10, |x, y| {
            if (5..8).contains(&x) && (2..4).contains(&y) {
                [255, 0, 0]
            } else {
                [10, 20, 30]
            }
        });
        let d = diff(&a, &b).unwrap();
        assert_eq!(d.changed, 6);
        assert_eq!(d.bbox, Some((5, 2, 7, 3)));
        assert_eq!(
            d.describe(),
            "6 pixels differ, all inside x 5..7, y 2..3 (3x2)"
        );
        let px = |x: usize, y: usize| &d.image.data[(y * 20 + x) * 3..(y * 20 + x) * 3 + 3];
        assert_eq!(px(5, 2), MAGENTA);
        assert_eq!(px(4, 1), BOX);
        assert_eq!(px(0, 0), [194, 197, 199]);
        let same = diff(&a, &a).unwrap();
        assert_eq!((same.changed, same.bbox), (0, None));
        assert_eq!(same.describe(), "identical pixels");
    }

    #[test]
    fn round_trips_and_refuses_what_it_cannot_compare() {
        let a = img(4, 3, |x, y| [x as u8, y as u8, 7]);
        assert_eq!(decode(&encode(&a).unwrap()).unwrap(), a);
        assert!(diff(&a, &img(3, 4, |_, _| [0; 3])).is_err());
        assert!(decode(b"not a png").is_err());
        // A header that claims a huge image is refused before any allocation that size.
        for (w, h) in [
            (60_000, 60_000),
            (4000, 1 << 30),
            (MAX_SIDE + 1, 1),
            (4097, 4096),
        ] {
            let mut huge = Vec::new();
            {
                let mut e = png::Encoder::new(&mut huge, w, h);
                e.set_color(png::ColorType::Rgb);
                let _ = e.write_header();
            }
            let e = format!("{:#}", decode(&huge).unwrap_err());
            assert!(e.contains(&format!("declares {w}x{h} pixels")), "{e}");
        }
        assert!(size_problem(4096, 4096).is_none());
        assert!(size_problem(640, 480).is_none());
        assert!(size_problem(0, 480).is_some());
    }
}
