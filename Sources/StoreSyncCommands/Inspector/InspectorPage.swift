/// The inspector's page: `Inspector/inspector.html` (HTML, CSS and script in one file), a
/// resource of this package compiled into the program, so it works offline and loads
/// nothing from anywhere else.
enum InspectorPage {
    /// The page's bytes.
    static var html: [UInt8] { PackageResources.inspector_html }
}
